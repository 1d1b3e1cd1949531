#pragma once
// Part of Tandem's public API (docs/embedding.md): where a tensor lives. The runtime uses these
// very types (runtime/device.hpp includes this header). Includes only the standard library.
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

enum class DeviceKind : std::uint8_t {
  cpu,   // host memory, 64-byte aligned
  cuda,  // GPU memory; only when the CUDA backend is built (otherwise creating one throws)
  sim,   // emulated device: tensors have a shape and a dtype but no data
};

// Where a tensor lives. A small value type: compare, copy and print it freely.
class Device {
 public:
  constexpr Device() = default;  // cpu

  static constexpr Device cpu() { return Device(DeviceKind::cpu, 0); }
  static Device cuda(int index = 0);  // throws std::invalid_argument for index < 0
  static constexpr Device sim() { return Device(DeviceKind::sim, 0); }
  // "cpu", "sim", "cuda" (= cuda:0), "cuda:N"; throws std::invalid_argument naming the text.
  static Device parse(std::string_view text);

  DeviceKind kind() const { return kind_; }
  int index() const { return index_; }
  bool is_cpu() const { return kind_ == DeviceKind::cpu; }
  bool is_cuda() const { return kind_ == DeviceKind::cuda; }
  bool is_sim() const { return kind_ == DeviceKind::sim; }
  // Whether tensors on this device carry data (false only for sim).
  bool has_data() const { return kind_ != DeviceKind::sim; }

  std::string str() const;  // "cpu", "cuda:1", "sim"

  friend constexpr bool operator==(const Device&, const Device&) = default;

 private:
  constexpr Device(DeviceKind kind, int index) : kind_(kind), index_(index) {}

  DeviceKind kind_ = DeviceKind::cpu;
  int index_ = 0;
};

// Whether this build has the CUDA backend, and how many GPUs it sees (0 without one).
bool cuda_backend_built();
int cuda_device_count();

}  // namespace tandem
