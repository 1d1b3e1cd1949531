#pragma once
// This process's resident memory, as the kernel counts it, for progress records and for the
// tests that check memory stays flat over a long run.
#include <cstdint>
#include <optional>

namespace tandem {

// Bytes of this process resident in RAM now (/proc/self/statm); nullopt where the system does
// not say (not Linux, /proc not mounted).
std::optional<std::uint64_t> resident_bytes();

}  // namespace tandem
