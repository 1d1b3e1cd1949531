// libFuzzer target for the trace reader (train/trace_file.hpp), what `tandem trace merge` and
// `tandem trace summarize` read from the user: any bytes either parse or raise
// std::runtime_error naming the source; what parses is copied and written out again (both
// recurse once per level, which the nesting bound keeps off the stack's end) and reads back.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "train/trace_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json trace;
  try {
    trace = tandem::train::parse_trace(text, "fuzz.json");
  } catch (const std::runtime_error&) {
    return 0;
  }
  const nlohmann::json copy = trace;
  const nlohmann::json again = tandem::train::parse_trace(copy.dump(), "fuzz-rewrite");
  if (again.type() != trace.type()) __builtin_trap();
  return 0;
}
