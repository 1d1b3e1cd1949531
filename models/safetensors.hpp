#pragma once
// The safetensors file layout (https://github.com/huggingface/safetensors), so that weights
// Tandem writes open in other tools and theirs open here:
//   8 bytes    N, the header's length, unsigned little-endian
//   N bytes    a UTF-8 JSON object: {"<name>": {"dtype": "F32", "shape": [2, 3],
//              "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value"}},
//              padded with spaces to a multiple of 8 (tensors stay 8-byte aligned)
//   the rest   the tensors' raw little-endian bytes; offsets are relative to this buffer, and
//              the tensors cover it exactly, in order, without gaps or overlaps.
// dtypes: F32, BF16, I32 (Tandem's DTypes); other tools' F16, F64, I64, ... are refused by name.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "models/param_set.hpp"

namespace tandem::models {

// What is wrong and where: "ckpt/stage-0.safetensors: tensor 'w': data_offsets [0, 12] hold 12
// bytes, shape [2, 3] of F32 needs 24".
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using SafetensorsMetadata = std::map<std::string, std::string>;

struct SafetensorsContent {
  ParamSet tensors;  // CPU tensors, in file order (ascending data offsets)
  SafetensorsMetadata metadata;
};

// Streams the file's bytes to `sink` in order (header, then each tensor) without building the
// whole file in memory; returns the bytes written. Tensors on other devices are copied to the
// host one at a time. Throws SafetensorsError for undefined or sim tensors (no data), a tensor
// named "__metadata__", names and metadata that are not valid UTF-8, or a file no reader here
// would accept (over kSafetensorsMaxTensors tensors or kSafetensorsMaxHeaderBytes of header).
std::uint64_t write_safetensors(const ParamSet& tensors, const SafetensorsMetadata& metadata,
                                const std::function<void(std::span<const std::byte>)>& sink);
std::vector<std::byte> safetensors_bytes(const ParamSet& tensors,
                                         const SafetensorsMetadata& metadata = {});
// Written atomically (runtime/atomic_file.hpp): the file is either the old one or the new one.
void write_safetensors(const std::filesystem::path& path, const ParamSet& tensors,
                       const SafetensorsMetadata& metadata = {});

// Parses and validates a whole file held in memory; `name_for_errors` starts every message.
// Never allocates more than the buffer's size (plus the parsed header) and never trusts a
// length, offset or shape from the buffer before checking it. The header is parsed in time and
// memory linear in its size.
SafetensorsContent read_safetensors_bytes(std::span<const std::byte> bytes,
                                          std::string_view name_for_errors);
// Reads the header first and each tensor straight into its storage. Throws SafetensorsError
// naming the path: not a regular file, unreadable, or anything read_safetensors_bytes refuses.
SafetensorsContent read_safetensors(const std::filesystem::path& path);

// The largest header accepted (the reference implementation's limit): bigger claims are
// refused before anything is allocated.
inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// The most tensors one file may list: generous (a checkpoint's stage file holds its stage's
// parameters once per stashed weight version plus the optimizer state, thousands for large
// models; other tools shard files long before this), and a bound on what a header makes the
// reader allocate and do (each tensor costs a few hundred bytes and a couple of microseconds).
// Headers listing more are refused as soon as the parser reaches the first tensor beyond it;
// writers refuse to write such files, and headers over kSafetensorsMaxHeaderBytes.
inline constexpr std::uint64_t kSafetensorsMaxTensors = 200'000;

}  // namespace tandem::models
