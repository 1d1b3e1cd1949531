#include "models/data/detail/read_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "models/data/data_file_error.hpp"

namespace tandem::models::data::detail {

std::vector<unsigned char> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataFileError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0) throw DataFileError(path, 0, "cannot determine the file size");
  std::vector<unsigned char> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  if (in.gcount() != size) {
    throw DataFileError(path, static_cast<uint64_t>(in.gcount()), "read failed");
  }
  return bytes;
}

}  // namespace tandem::models::data::detail
