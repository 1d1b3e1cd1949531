// libFuzzer target for the config reader (train/config.hpp) on text, with overrides of single
// keys (train/config_overrides.hpp): each line "#set KEY=VALUE" (a YAML comment, so the rest of
// the text reads as it would alone) is also applied as an override, as `--set` would apply it.
// Any bytes either load or raise train::ConfigError (which `tandem` prints with file:line);
// anything else (a crash, a sanitizer report, another exception type, an allocation the size
// checks should have refused) is a finding. Checked against a fixed small machine so the outcome
// does not depend on the host.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "train/config.hpp"
#include "train/config_overrides.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const tandem::train::Machine machine{
      .memory_bytes = 256.0 * 1024 * 1024, .cuda_devices = 2, .cuda_built = true};
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    tandem::train::ConfigOverrides overrides;
    overrides.label = "--set";
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with("#set ")) {
        overrides.items.push_back(tandem::train::parse_override(line.substr(5), "--set"));
      }
    }
    (void)tandem::train::parse_config(text, "fuzz.yaml", overrides, machine);
  } catch (const tandem::train::ConfigError&) {
  }
  return 0;
}
