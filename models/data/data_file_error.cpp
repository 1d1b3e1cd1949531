#include "models/data/data_file_error.hpp"

namespace tandem::models::data {

DataFileError::DataFileError(const std::filesystem::path& file, uint64_t offset,
                             const std::string& what)
    : std::runtime_error(file.string() + ": byte offset " + std::to_string(offset) + ": " + what),
      file_(file),
      offset_(offset) {}

}  // namespace tandem::models::data
