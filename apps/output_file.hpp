#pragma once
// Where a command writes (-o, --svg): never over one of the same command's inputs, never a
// directory, and all or nothing: a reader sees the old file or the whole new one, and a failed
// write leaves no temporary file behind.
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

namespace tandem::apps {

// Throws UsageError naming `flag` when `output` is a directory or the same file as one of
// `inputs` (by any path: links and relative names included).
void check_output(std::string_view flag, const std::filesystem::path& output,
                  std::initializer_list<std::filesystem::path> inputs);

// Writes `text` to a temporary name beside `output`, then renames it over `output`. Throws
// std::runtime_error naming `output` (the temporary removed) when anything fails.
void write_output(const std::filesystem::path& output, std::string_view text);

}  // namespace tandem::apps
