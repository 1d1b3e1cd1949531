// libFuzzer target for PipeDream's graph.txt reader (planner/pipedream_graph_profile.hpp), what
// `tandem plan --format pipedream` reads: any bytes either parse or raise std::runtime_error
// naming the line; a graph that parses is a valid profile (it writes to JSON that reads back
// with the same layers and edges).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "planner/pipedream_graph_profile.hpp"
#include "planner/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tp = tandem::planner;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tp::Profile profile;
  try {
    profile = tp::parse_pipedream_graph(text, "fuzz-graph.txt");
  } catch (const std::runtime_error&) {
    return 0;
  }
  const tp::Profile again = tp::parse_profile(tp::profile_to_json(profile), "fuzz-rewrite");
  if (again.layers.size() != profile.layers.size()) __builtin_trap();
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    if (again.layers[l].inputs != profile.layers[l].inputs) __builtin_trap();
  }
  return 0;
}
