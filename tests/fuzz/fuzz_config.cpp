// libFuzzer target for the config reader (train/config.hpp) on text: any bytes either load or
// raise train::ConfigError (which `tandem` prints with file:line); anything else (a crash, a
// sanitizer report, another exception type, an allocation the size checks should have refused) is a
// finding. Checked against a fixed small machine so the outcome does not depend on the host.
#include <cstddef>
#include <cstdint>
#include <string>

#include "train/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const tandem::train::Machine machine{
      .memory_bytes = 256.0 * 1024 * 1024, .cuda_devices = 2, .cuda_built = true};
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    (void)tandem::train::parse_config(text, "fuzz.yaml", machine);
  } catch (const tandem::train::ConfigError&) {
  }
  return 0;
}
