// libFuzzer target for the checkpoint reader: a manifest and its stage files in one input,
//   <manifest.json> SEP <stage-0.safetensors> SEP <stage-1.safetensors> ...
// with SEP the 11 bytes "\0--stage--\0". Checksums are not verified (a fuzzer cannot forge
// SHA-256), so mutations reach the stage files' parsing and the manifest/file consistency
// checks. Anything but a train::CheckpointError is a finding. Seeds: tests/fuzz/corpus/checkpoint/.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "train/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static constexpr std::string_view kSeparator("\0--stage--\0", 11);
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t end = input.find(kSeparator);
  const std::string_view manifest = input.substr(0, end);
  std::map<std::string, std::span<const std::byte>> files;
  for (int stage = 0; end != std::string_view::npos && stage < 64; ++stage) {
    const std::size_t begin = end + kSeparator.size();
    end = input.find(kSeparator, begin);
    const std::string_view piece =
        input.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin);
    files["stage-" + std::to_string(stage) + ".safetensors"] =
        std::as_bytes(std::span<const char>(piece.data(), piece.size()));
  }
  try {
    tandem::train::read_checkpoint_bytes(manifest, files, "fuzz", /*verify_checksums=*/false);
  } catch (const tandem::train::CheckpointError&) {
  }
  return 0;
}
