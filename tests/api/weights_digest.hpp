#pragma once
// A digest of what Session::weights() returns (each tensor's name, shape and values), so that a
// test can compare a rank's weights with one process's, whichever program printed them
// (config_runner.cpp prints it, config_session_test.cpp compares). Public headers only.
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tandem/tandem.hpp"

namespace tandem::api_test {

// "<tensors> <elements> <64-bit FNV-1a of every name, shape and f32 value, in order>".
inline std::string weights_digest(const std::vector<NamedTensor>& weights) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&h](const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  };
  std::int64_t elements = 0;
  for (const NamedTensor& t : weights) {
    mix(t.name.data(), t.name.size() + 1);
    for (const std::int64_t d : t.value.shape()) mix(&d, sizeof d);
    const std::vector<float> v = t.value.to_float_vector();
    mix(v.data(), v.size() * sizeof(float));
    elements += t.value.numel();
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "%zu %" PRId64 " %016" PRIx64, weights.size(), elements, h);
  return buf;
}

}  // namespace tandem::api_test
