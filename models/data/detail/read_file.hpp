#pragma once
#include <filesystem>
#include <vector>

namespace tandem::models::data::detail {

// The whole file; throws DataFileError (offset 0) when it cannot be opened or read.
std::vector<unsigned char> read_file(const std::filesystem::path& path);

}  // namespace tandem::models::data::detail
