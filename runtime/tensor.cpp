#include "runtime/tensor.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "runtime/detail/device_backend.hpp"
#include "runtime/detail/storage.hpp"
#include "runtime/stream.hpp"

namespace tandem {
namespace {

std::int64_t checked_numel(const Shape& shape, const char* op) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) {
      throw std::invalid_argument(std::string(op) + ": negative dimension in shape " +
                                  shape_str(shape));
    }
    n *= d;
  }
  return n;
}

// Copies bytes between any two devices with data.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  detail::DeviceBackend* backend = detail::cuda_backend();
  if (backend == nullptr) {
    throw std::runtime_error("copy from " + src_device.str() + " to " + dst_device.str() +
                             ": CUDA backend not built");
  }
  backend->copy(dst, dst_device, src, src_device, bytes);
}

void convert_elements(const void* src, DType from, void* dst, DType to, std::int64_t n) {
  if (from == to) {
    // An empty tensor may have no storage: memcpy must not see its null pointer.
    if (n > 0) std::memcpy(dst, src, static_cast<std::size_t>(n) * dtype_size(from));
    return;
  }
  auto load = [&](std::int64_t i) -> float {
    switch (from) {
      case DType::f32:
        return static_cast<const float*>(src)[i];
      case DType::bf16:
        return static_cast<const BFloat16*>(src)[i].to_float();
      case DType::i32:
        return static_cast<float>(static_cast<const std::int32_t*>(src)[i]);
    }
    return 0.0f;
  };
  for (std::int64_t i = 0; i < n; ++i) {
    switch (to) {
      case DType::f32:
        static_cast<float*>(dst)[i] = load(i);
        break;
      case DType::bf16:
        static_cast<BFloat16*>(dst)[i] = BFloat16::from_float(load(i));
        break;
      case DType::i32: {
        if (from == DType::f32 || from == DType::bf16) {
          const float v = load(i);
          // Truncation like a C++ cast, but defined for every input.
          if (!std::isfinite(v) || v >= 2147483648.0f || v < -2147483648.0f) {
            throw std::domain_error("Tensor::to(i32): value " + std::to_string(v) + " at element " +
                                    std::to_string(i) + " does not fit an i32");
          }
          static_cast<std::int32_t*>(dst)[i] = static_cast<std::int32_t>(v);
        }
        break;
      }
    }
  }
}

}  // namespace

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  Tensor t;
  t.numel_ = checked_numel(shape, "Tensor::empty");
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<TensorStorage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::empty_pinned(Shape shape, DType dtype) {
  Tensor t;
  t.numel_ = checked_numel(shape, "Tensor::empty_pinned");
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = Device::cpu();
  t.storage_ = std::make_shared<TensorStorage>(t.nbytes(), t.device_, /*pinned=*/true);
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.set_zero();
  return t;
}

Tensor Tensor::full(Shape shape, float value, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, Shape shape) {
  Tensor t = empty(std::move(shape), DType::f32);
  if (static_cast<std::int64_t>(values.size()) != t.numel()) {
    throw std::invalid_argument("Tensor::from_vector: " + std::to_string(values.size()) +
                                " values for shape " + shape_str(t.shape()) + " (" +
                                std::to_string(t.numel()) + " elements)");
  }
  std::memcpy(t.raw_data(), values.data(), t.nbytes());
  return t;
}

Tensor Tensor::from_vector(const std::vector<std::int32_t>& values, Shape shape) {
  Tensor t = empty(std::move(shape), DType::i32);
  if (static_cast<std::int64_t>(values.size()) != t.numel()) {
    throw std::invalid_argument("Tensor::from_vector: " + std::to_string(values.size()) +
                                " values for shape " + shape_str(t.shape()) + " (" +
                                std::to_string(t.numel()) + " elements)");
  }
  std::memcpy(t.raw_data(), values.data(), t.nbytes());
  return t;
}

std::int64_t Tensor::dim(int i) const {
  const int r = rank();
  const int j = i < 0 ? i + r : i;
  if (j < 0 || j >= r) {
    throw std::out_of_range("Tensor::dim(" + std::to_string(i) + "): out of range for " +
                            describe());
  }
  return shape_[static_cast<std::size_t>(j)];
}

Shape Tensor::strides() const {
  Shape s(shape_.size(), 1);
  for (std::size_t i = shape_.size(); i-- > 1;) s[i - 1] = s[i] * shape_[i];
  return s;
}

void Tensor::check_access(DType want, const char* op) const {
  if (!defined()) throw std::logic_error(std::string("Tensor::") + op + ": undefined tensor");
  if (!device_.is_cpu()) {
    throw std::invalid_argument(std::string("Tensor::") + op + "<" + std::string(dtype_name(want)) +
                                ">: " + describe() + " is not on the cpu");
  }
  if (dtype_ != want) {
    throw std::invalid_argument(std::string("Tensor::") + op + "<" + std::string(dtype_name(want)) +
                                ">: dtype mismatch, tensor is " + describe());
  }
}

void* Tensor::address() const {
  return static_cast<char*>(storage_->ptr) + offset_;
}

void* Tensor::raw_data() {
  if (!defined()) throw std::logic_error("Tensor::raw_data: undefined tensor");
  if (!device_.has_data()) {
    throw std::invalid_argument("Tensor::raw_data: " + describe() + " has no data");
  }
  return address();
}

const void* Tensor::raw_data() const {
  return const_cast<Tensor*>(this)->raw_data();
}

std::vector<float> Tensor::to_float_vector() const {
  const Tensor host = to(Device::cpu());
  std::vector<float> out(static_cast<std::size_t>(numel_));
  convert_elements(host.raw_data(), dtype_, out.data(), DType::f32, numel_);
  return out;
}

std::vector<std::int32_t> Tensor::to_int_vector() const {
  const Tensor host = to(Device::cpu());
  std::vector<std::int32_t> out(static_cast<std::size_t>(numel_));
  convert_elements(host.raw_data(), dtype_, out.data(), DType::i32, numel_);
  return out;
}

Tensor Tensor::clone() const {
  if (!defined()) return Tensor();
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (!defined())
    throw std::logic_error("Tensor::to(" + std::string(dtype_name(dtype)) + "): undefined tensor");
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype, device_);
  if (device_.is_sim()) return out;
  if (device_.is_cpu()) {
    convert_elements(raw_data(), dtype_, out.raw_data(), dtype, numel_);
    return out;
  }
  // Other devices convert on the host: they only allocate and copy here.
  out.copy_from(to(Device::cpu()).to(dtype));
  return out;
}

Tensor Tensor::to(Device device) const {
  if (!defined()) throw std::logic_error("Tensor::to(" + device.str() + "): undefined tensor");
  if (device == device_) return *this;
  Tensor out = empty(shape_, dtype_, device);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::reshape(Shape shape) const {
  if (!defined()) throw std::logic_error("Tensor::reshape: undefined tensor");
  int inferred = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) {
        throw std::invalid_argument("Tensor::reshape: more than one -1 in " + shape_str(shape));
      }
      inferred = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw std::invalid_argument("Tensor::reshape: negative dimension in " + shape_str(shape));
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || numel_ % known != 0) {
      throw std::invalid_argument("Tensor::reshape: cannot reshape " + describe() + " to " +
                                  shape_str(shape));
    }
    shape[static_cast<std::size_t>(inferred)] = numel_ / known;
    known = numel_;
  }
  if (known != numel_) {
    throw std::invalid_argument("Tensor::reshape: cannot reshape " + describe() + " to " +
                                shape_str(shape) + " (" + std::to_string(numel_) + " vs " +
                                std::to_string(known) + " elements)");
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  if (!defined()) throw std::logic_error("Tensor::slice: undefined tensor");
  if (rank() == 0) throw std::invalid_argument("Tensor::slice: " + describe() + " has rank 0");
  if (begin < 0 || end < begin || end > shape_[0]) {
    throw std::out_of_range("Tensor::slice(" + std::to_string(begin) + ", " + std::to_string(end) +
                            "): out of range for " + describe());
  }
  const std::int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.numel_ = row * (end - begin);
  t.offset_ += static_cast<std::size_t>(begin * row) * dtype_size(dtype_);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (!defined() || !src.defined()) throw std::logic_error("Tensor::copy_from: undefined tensor");
  if (src.shape_ != shape_ || src.dtype_ != dtype_) {
    throw std::invalid_argument("Tensor::copy_from: source " + src.describe() +
                                " does not match destination " + describe());
  }
  if (device_.is_sim()) return;  // a sim tensor keeps no data
  if (src.device_.is_sim()) {
    throw std::invalid_argument("Tensor::copy_from: source " + src.describe() + " has no data");
  }
  copy_bytes(address(), device_, src.address(), src.device_, nbytes());
}

void Tensor::copy_from(const Tensor& src, Stream& stream) {
  if (!defined() || !src.defined()) throw std::logic_error("Tensor::copy_from: undefined tensor");
  if (src.shape_ != shape_ || src.dtype_ != dtype_) {
    throw std::invalid_argument("Tensor::copy_from: source " + src.describe() +
                                " does not match destination " + describe());
  }
  if (device_.is_sim()) return;
  if (src.device_.is_sim()) {
    throw std::invalid_argument("Tensor::copy_from: source " + src.describe() + " has no data");
  }
  if (nbytes() == 0) return;
  if (stream.device().is_cpu()) {
    stream.enqueue([dst = *this, src]() mutable { dst.copy_from(src); });
    return;
  }
  detail::cuda_backend()->copy_async(address(), device_, src.address(), src.device_, nbytes(),
                                     stream.native_handle(), stream.device().index());
  // Without this, dropping the last handle now would let the caching allocator hand the memory
  // to the next tensor while the copy still reads or writes it.
  stream.record().on_complete([dst = *this, src] {});
}

void Tensor::set_zero(Stream& stream) {
  if (!defined()) throw std::logic_error("Tensor::set_zero: undefined tensor");
  if (device_.is_sim() || nbytes() == 0) return;
  if (stream.device().is_cpu()) {
    stream.enqueue([dst = *this]() mutable { dst.set_zero(); });
    return;
  }
  if (!device_.is_cuda()) {
    throw std::invalid_argument("Tensor::set_zero: " + describe() + " on a stream of " +
                                stream.device().str() + " (use a cpu stream)");
  }
  detail::cuda_backend()->set_zero_async(address(), nbytes(), stream.native_handle(),
                                         stream.device().index());
  stream.record().on_complete([dst = *this] {});
}

void Tensor::fill(float value) {
  if (!defined()) throw std::logic_error("Tensor::fill: undefined tensor");
  if (device_.is_sim()) return;
  if (!device_.is_cpu()) {
    Tensor host = Tensor::full(shape_, value, dtype_);
    copy_from(host);
    return;
  }
  switch (dtype_) {
    case DType::f32: {
      float* p = data<float>();
      for (std::int64_t i = 0; i < numel_; ++i) p[i] = value;
      break;
    }
    case DType::bf16: {
      const BFloat16 b = BFloat16::from_float(value);
      BFloat16* p = data<BFloat16>();
      for (std::int64_t i = 0; i < numel_; ++i) p[i] = b;
      break;
    }
    case DType::i32: {
      const auto v = static_cast<std::int32_t>(value);
      std::int32_t* p = data<std::int32_t>();
      for (std::int64_t i = 0; i < numel_; ++i) p[i] = v;
      break;
    }
  }
}

void Tensor::set_zero() {
  if (!defined()) throw std::logic_error("Tensor::set_zero: undefined tensor");
  if (device_.is_cpu()) {
    std::memset(address(), 0, nbytes());  // all-zero bits are 0 in every dtype
  } else if (device_.is_cuda()) {
    detail::cuda_backend()->set_zero(address(), nbytes(), device_.index());
  }
}

std::size_t Tensor::allocated_bytes() const {
  return storage_ == nullptr ? 0 : storage_->bytes;
}

bool Tensor::is_pinned() const {
  return storage_ != nullptr && storage_->pinned;
}

bool Tensor::shares_storage(const Tensor& other) const {
  return storage_ != nullptr && storage_ == other.storage_;
}

bool Tensor::storage_unique() const {
  return storage_ != nullptr && storage_.use_count() == 1;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " " + device_.str();
}

Tensor concat_rows(std::span<const Tensor> parts) {
  if (parts.empty()) throw std::invalid_argument("concat_rows: no tensors");
  const Tensor& first = parts.front();
  if (first.rank() == 0)
    throw std::invalid_argument("concat_rows: " + first.describe() + " has rank 0");
  Shape shape = first.shape();
  std::int64_t rows = 0;
  for (const Tensor& p : parts) {
    Shape tail_a(p.shape().begin() + (p.rank() > 0 ? 1 : 0), p.shape().end());
    Shape tail_b(shape.begin() + 1, shape.end());
    if (p.rank() != first.rank() || tail_a != tail_b || p.dtype() != first.dtype() ||
        p.device() != first.device()) {
      throw std::invalid_argument("concat_rows: " + p.describe() + " does not match " +
                                  first.describe() + " (all but dimension 0 must agree)");
    }
    rows += p.dim(0);
  }
  shape[0] = rows;
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::int64_t at = 0;
  for (const Tensor& p : parts) {
    Tensor dst = out.slice(at, at + p.dim(0));
    dst.copy_from(p);
    at += p.dim(0);
  }
  return out;
}

}  // namespace tandem
