#pragma once
// A pipeline trace on disk (train/pipeline_trace.hpp): reading one that `tandem trace` commands
// take from the user, within a size bound, and writing one.
#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tandem::train {

// The largest trace read back: far above the trace of a long run (some hundred bytes an
// action), and a bound on what parsing one may cost.
inline constexpr std::size_t kMaxTraceBytes = std::size_t{1} << 30;
// The deepest nesting a trace may have: a trace nests objects a few levels deep.
inline constexpr int kMaxTraceDepth = 32;

// Throws std::runtime_error naming `path`: missing, not a regular file, larger than
// kMaxTraceBytes, unreadable, or not JSON.
nlohmann::json read_trace_file(const std::filesystem::path& path);
// The same checks on bytes that came from elsewhere; errors name `source`.
nlohmann::json parse_trace(std::string_view bytes, const std::string& source);
// All or nothing (runtime/atomic_file.hpp); throws std::runtime_error naming `path` when it cannot
// be written.
void write_trace_file(const nlohmann::json& trace, const std::filesystem::path& path);

}  // namespace tandem::train
