#pragma once
// Part of Tandem's public API (docs/embedding.md): the tensor every layer takes and returns.
// The runtime uses this very class (runtime/tensor.hpp includes this header), so a tensor
// crosses between an application and Tandem as a handle, without conversion. Includes only the
// standard library and its public neighbours.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device.hpp"
#include "dtype.hpp"

namespace tandem {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);  // 1 for rank 0
std::string shape_str(const Shape& shape);     // "[2, 3]"

class Stream;
struct TensorStorage;  // opaque: one allocation shared by handles and views

// A dense, contiguous (row-major) n-dimensional array on a device.
//
// Copying a Tensor copies a handle: both share the same storage, and writes through one are
// seen through the other. Data is copied only on request (clone, to, copy_from). This is what
// lets a stage stash a weight version or pass an activation on without copying it.
// Storage of CPU tensors is 64-byte aligned; sim tensors have a shape and no data.
//
// Inside a layer, compute through the layer's Kernels (tandem/kernels.hpp) rather than through
// data<T>(): data<T>() reaches only cpu tensors, and the members below that copy or fill
// (clone, to, copy_from, fill, set_zero) are not ordered with a device's queued kernels.
// Members taking a Stream are the runtime's own (an application has no Stream to pass).
class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  // Uninitialised contents.
  static Tensor empty(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(Shape shape, float value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  // A cpu tensor in page-locked (pinned) memory: the staging buffer of asynchronous
  // host<->device copies. Ordinary host memory when the CUDA backend is not built or sees no
  // GPU (is_pinned() then says false). Pinned blocks are cached like device memory.
  static Tensor empty_pinned(Shape shape, DType dtype = DType::f32);
  static Tensor from_vector(const std::vector<float>& values, Shape shape);
  static Tensor from_vector(const std::vector<std::int32_t>& values, Shape shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const;  // negative i counts from the back; throws when out of range
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  // Row-major strides in elements (the layout is always contiguous).
  Shape strides() const;
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  // Bytes of device memory held by the storage this tensor views (shared with its other views):
  // 0 for sim and undefined tensors.
  std::size_t allocated_bytes() const;
  bool is_pinned() const;

  // Typed access to CPU data; throws unless the tensor is defined, on the CPU and of T's dtype.
  template <class T>
  T* data() {
    check_access(DTypeOf<T>::value, "data");
    return static_cast<T*>(address());
  }
  template <class T>
  const T* data() const {
    check_access(DTypeOf<T>::value, "data");
    return static_cast<const T*>(address());
  }
  // Untyped address of the first element on the tensor's device (CPU or GPU memory);
  // throws for sim and undefined tensors.
  void* raw_data();
  const void* raw_data() const;

  // The values converted to f32 / i32 (copies to the host when needed).
  std::vector<float> to_float_vector() const;
  std::vector<std::int32_t> to_int_vector() const;

  // A deep copy on the same device.
  Tensor clone() const;
  // A converting copy; returns *this (a handle, no copy) when already of that dtype.
  Tensor to(DType dtype) const;
  // A copy on another device; returns *this when already there.
  Tensor to(Device device) const;
  // The same storage seen with another shape; one entry may be -1 (inferred).
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) along dimension 0, sharing storage (a micro-batch of a minibatch).
  Tensor slice(std::int64_t begin, std::int64_t end) const;

  // Copies src's data into this tensor's storage; shapes and dtypes must match, devices may
  // differ.
  void copy_from(const Tensor& src);
  // The same, ordered on `stream`; returns before the copy runs. Both storages are kept alive
  // until it has run, so the caller may drop its handles at once; reading the destination (or
  // writing the source) needs an event recorded after it. A cuda stream copies with
  // cudaMemcpyAsync (asynchronous for cuda and pinned memory); a cpu stream runs the ordinary
  // copy on its worker.
  void copy_from(const Tensor& src, Stream& stream);
  void fill(float value);
  void set_zero();
  // Ordered on `stream`, like copy_from above; a cuda stream needs a cuda tensor.
  void set_zero(Stream& stream);

  bool shares_storage(const Tensor& other) const;
  // True when no other handle or view shares this storage, so writing in place cannot be
  // observed elsewhere (used for copy-on-write weight updates).
  bool storage_unique() const;

  std::string describe() const;  // "f32[2, 3] cpu"

 private:
  void check_access(DType want, const char* op) const;
  void* address() const;

  std::shared_ptr<TensorStorage> storage_;
  std::size_t offset_ = 0;  // bytes from the start of the storage
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
};

// Concatenation along dimension 0 (slices back into a minibatch); other dimensions, dtypes and
// devices must match.
Tensor concat_rows(std::span<const Tensor> parts);

}  // namespace tandem
