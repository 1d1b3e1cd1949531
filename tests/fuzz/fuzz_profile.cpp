// libFuzzer target for the planner's profile reader (planner/profile.hpp), what `tandem plan
// --profile` reads: any bytes either parse or raise std::runtime_error naming the field; a
// profile that parses must write to JSON that reads back to the same values.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "planner/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tp = tandem::planner;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tp::Profile profile;
  try {
    profile = tp::parse_profile_text(text, "fuzz.json");
  } catch (const std::runtime_error&) {
    return 0;
  }
  const tp::Profile again = tp::parse_profile(tp::profile_to_json(profile), "fuzz-rewrite");
  if (again.layers.size() != profile.layers.size() || again.minibatch != profile.minibatch) {
    __builtin_trap();
  }
  return 0;
}
