// libFuzzer target for the safetensors reader (which also parses every checkpoint stage file):
// any bytes either parse or raise SafetensorsError; anything else (a crash, a sanitizer report,
// another exception) is a finding. Seeds: tests/fuzz/corpus/safetensors/.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "models/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem::models;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  std::optional<SafetensorsContent> content;
  try {
    content = read_safetensors_bytes(bytes, "fuzz-input");
  } catch (const SafetensorsError&) {
    return 0;
  }
  // Whatever was read writes back and reads again: an exception here escapes, and libFuzzer
  // reports it.
  const SafetensorsContent again =
      read_safetensors_bytes(safetensors_bytes(content->tensors, content->metadata), "rewritten");
  if (again.tensors.names() != content->tensors.names() || again.metadata != content->metadata) {
    __builtin_trap();
  }
  return 0;
}
