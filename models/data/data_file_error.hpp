#pragma once
// Errors about data files name the file and the byte offset where reading went wrong, so a
// truncated download or a wrong file is found without a hex editor.
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace tandem::models::data {

class DataFileError : public std::runtime_error {
 public:
  DataFileError(const std::filesystem::path& file, uint64_t offset, const std::string& what);

  const std::filesystem::path& file() const { return file_; }
  uint64_t offset() const { return offset_; }

 private:
  std::filesystem::path file_;
  uint64_t offset_;
};

}  // namespace tandem::models::data
