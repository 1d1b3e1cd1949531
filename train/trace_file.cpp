#include "train/trace_file.hpp"

#include <fstream>
#include <stdexcept>
#include <system_error>

#include "runtime/atomic_file.hpp"

namespace tandem::train {

nlohmann::json parse_trace(std::string_view bytes, const std::string& source) {
  if (bytes.size() > kMaxTraceBytes) {
    throw std::runtime_error(source + ": " + std::to_string(bytes.size()) +
                             " bytes, more than a trace may hold (" +
                             std::to_string(kMaxTraceBytes) + ")");
  }
  // Copying and printing a JSON value recurse once per level: a trace nests a few levels.
  struct TooDeep {};
  int depth = 0;
  const nlohmann::json::parser_callback_t limit = [&](int, nlohmann::json::parse_event_t event,
                                                      nlohmann::json&) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start || event == E::array_start) {
      if (++depth > kMaxTraceDepth) throw TooDeep{};
    } else if (event == E::object_end || event == E::array_end) {
      --depth;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(bytes.begin(), bytes.end(), limit);
  } catch (const TooDeep&) {
    throw std::runtime_error(source + ": JSON nests deeper than " + std::to_string(kMaxTraceDepth) +
                             " levels: not a trace");
  } catch (const nlohmann::json::exception& e) {
    // A syntax error, or a number no double holds ("ts": 1e999, which would be infinite).
    throw std::runtime_error(source + ": not valid JSON: " + e.what());
  }
}

nlohmann::json read_trace_file(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) throw std::runtime_error(name + ": no such file");
  if (!std::filesystem::is_regular_file(status)) {
    throw std::runtime_error(name + ": not a regular file");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxTraceBytes) {
    throw std::runtime_error(name + ": " + std::to_string(size) +
                             " bytes, more than a trace may hold (" +
                             std::to_string(kMaxTraceBytes) + ")");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(name + ": cannot open for reading");
  // In pieces, stopping past the bound: the file may have grown since its size was read.
  std::string bytes;
  std::string piece(std::size_t{1} << 20, '\0');
  while (in && bytes.size() <= kMaxTraceBytes) {
    in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    bytes.append(piece.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw std::runtime_error(name + ": read failed");
  return parse_trace(bytes, name);
}

void write_trace_file(const nlohmann::json& trace, const std::filesystem::path& path) {
  try {
    AtomicFile out(path);
    out.write(trace.dump() + "\n");
    out.commit();
  } catch (const FileError& e) {
    throw std::runtime_error(path.string() + ": writing the trace failed: " + e.what());
  }
}

}  // namespace tandem::train
