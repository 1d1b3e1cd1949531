#include "models/data/idx_file.hpp"

#include <string>

#include "models/data/data_file_error.hpp"
#include "models/data/detail/read_file.hpp"

namespace tandem::models::data {

IdxArray read_idx_ubyte(const std::filesystem::path& path) {
  std::vector<unsigned char> bytes = detail::read_file(path);
  if (bytes.size() < 4) {
    throw DataFileError(path, bytes.size(), "file ends inside the 4-byte IDX magic number");
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    throw DataFileError(path, bytes[0] != 0 ? 0 : 1,
                        "not an IDX file (the magic number must start with two zero bytes)");
  }
  if (bytes[2] != 0x08) {
    throw DataFileError(
        path, 2, "IDX element type " + std::to_string(bytes[2]) + " is not unsigned byte (8)");
  }
  const int ndims = bytes[3];
  if (ndims == 0) throw DataFileError(path, 3, "IDX file with 0 dimensions");
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(ndims);
  if (bytes.size() < header) {
    throw DataFileError(path, bytes.size(),
                        "file ends inside the IDX header of " + std::to_string(ndims) +
                            " dimensions (" + std::to_string(header) + " bytes)");
  }
  IdxArray out;
  out.data_offset = header;
  uint64_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    const size_t at = 4 + 4 * static_cast<size_t>(d);
    const uint32_t dim = (uint32_t{bytes[at]} << 24) | (uint32_t{bytes[at + 1]} << 16) |
                         (uint32_t{bytes[at + 2]} << 8) | uint32_t{bytes[at + 3]};
    out.dims.push_back(dim);
    count *= dim;
    if (count > (uint64_t{1} << 40)) throw DataFileError(path, at, "IDX dimensions too large");
  }
  const uint64_t expected = header + count;
  if (bytes.size() < expected) {
    throw DataFileError(path, bytes.size(),
                        "truncated: the dimensions need " + std::to_string(expected) +
                            " bytes, the file has " + std::to_string(bytes.size()));
  }
  if (bytes.size() > expected) {
    throw DataFileError(path, expected,
                        std::to_string(bytes.size() - expected) +
                            " unexpected bytes after the data the dimensions describe");
  }
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

}  // namespace tandem::models::data
