#pragma once
// IDX files (the MNIST format): bytes 0-1 zero, byte 2 the element type (0x08 = unsigned
// byte, the only one read here), byte 3 the number of dimensions, then each dimension as a
// big-endian uint32, then the elements in row-major order.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace tandem::models::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
  uint64_t data_offset = 0;  // byte offset of the first element in the file
};

// Throws DataFileError (file and byte offset) on a short header, a bad magic number, an
// element type other than unsigned byte, or a data section shorter or longer than the
// dimensions say.
IdxArray read_idx_ubyte(const std::filesystem::path& path);

}  // namespace tandem::models::data
