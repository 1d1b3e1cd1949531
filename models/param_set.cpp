#include "models/param_set.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "runtime/counter_rng.hpp"

namespace tandem::models {

void ParamSet::add(std::string name, Tensor tensor) {
  if (!tensor.defined()) {
    throw std::invalid_argument("ParamSet::add: undefined tensor for '" + name + "'");
  }
  if (index_.contains(name)) {
    throw std::invalid_argument("ParamSet::add: duplicate parameter name '" + name + "'");
  }
  index_.emplace(name, size());
  names_.push_back(std::move(name));
  tensors_.push_back(std::move(tensor));
}

bool ParamSet::contains(std::string_view name) const {
  return index_.contains(name);
}

std::int64_t ParamSet::index_of(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    throw std::out_of_range("ParamSet: no parameter named '" + std::string(name) + "' (" +
                            std::to_string(size()) + " parameters)");
  }
  return it->second;
}

const Tensor& ParamSet::at(std::string_view name) const {
  return (*this)[index_of(name)];
}
Tensor& ParamSet::at(std::string_view name) {
  return (*this)[index_of(name)];
}

std::span<const Tensor> ParamSet::range(std::int64_t begin, std::int64_t count) const {
  if (begin < 0 || count < 0 || begin + count > size()) {
    throw std::out_of_range("ParamSet::range(" + std::to_string(begin) + ", " +
                            std::to_string(count) + "): set has " + std::to_string(size()));
  }
  return std::span<const Tensor>(tensors_).subspan(static_cast<std::size_t>(begin),
                                                   static_cast<std::size_t>(count));
}

std::span<Tensor> ParamSet::range(std::int64_t begin, std::int64_t count) {
  if (begin < 0 || count < 0 || begin + count > size()) {
    throw std::out_of_range("ParamSet::range(" + std::to_string(begin) + ", " +
                            std::to_string(count) + "): set has " + std::to_string(size()));
  }
  return std::span<Tensor>(tensors_).subspan(static_cast<std::size_t>(begin),
                                             static_cast<std::size_t>(count));
}

std::int64_t ParamSet::numel() const {
  std::int64_t n = 0;
  for (const Tensor& t : tensors_) n += t.numel();
  return n;
}

std::size_t ParamSet::nbytes() const {
  std::size_t n = 0;
  for (const Tensor& t : tensors_) n += t.nbytes();
  return n;
}

ParamSet ParamSet::clone() const {
  ParamSet out;
  for (std::int64_t i = 0; i < size(); ++i) out.add(name(i), (*this)[i].clone());
  return out;
}

ParamSet ParamSet::zeros_like() const {
  ParamSet out;
  for (std::int64_t i = 0; i < size(); ++i) {
    const Tensor& t = (*this)[i];
    out.add(name(i), Tensor::zeros(t.shape(), t.dtype(), t.device()));
  }
  return out;
}

void ParamSet::add_(const ParamSet& other) {
  if (other.names_ != names_) {
    throw std::invalid_argument("ParamSet::add_: parameter names differ (" +
                                std::to_string(size()) + " vs " + std::to_string(other.size()) +
                                " entries)");
  }
  for (std::int64_t i = 0; i < size(); ++i) {
    Tensor& a = (*this)[i];
    const Tensor& b = other[i];
    if (a.shape() != b.shape() || a.dtype() != DType::f32 || b.dtype() != DType::f32) {
      throw std::invalid_argument("ParamSet::add_: '" + name(i) + "' is " + a.describe() +
                                  " here and " + b.describe() + " in the other set");
    }
    float* pa = a.data<float>();
    const float* pb = b.data<float>();
    for (std::int64_t k = 0; k < a.numel(); ++k) pa[k] += pb[k];
  }
}

void ParamSet::scale_(float factor) {
  for (Tensor& t : tensors_) {
    float* p = t.data<float>();
    for (std::int64_t k = 0; k < t.numel(); ++k) p[k] *= factor;
  }
}

ParamSet ParamSet::subset(std::span<const std::string> wanted) const {
  const std::unordered_set<std::string> set(wanted.begin(), wanted.end());
  for (const std::string& w : wanted) index_of(w);  // throws naming a missing one
  ParamSet out;
  for (std::int64_t i = 0; i < size(); ++i) {
    if (set.contains(name(i))) out.add(name(i), (*this)[i]);
  }
  return out;
}

void ParamSet::merge(const ParamSet& other) {
  for (std::int64_t i = 0; i < other.size(); ++i) add(other.name(i), other[i]);
}

std::uint64_t ParamSet::fingerprint() const {
  std::vector<std::uint64_t> parts;
  parts.reserve(static_cast<std::size_t>(size()));
  for (std::int64_t i = 0; i < size(); ++i)
    parts.push_back(tensor_fingerprint(name(i), (*this)[i]));
  return combine_fingerprints(parts);
}

std::uint64_t ParamSet::tensor_fingerprint(const std::string& name, const Tensor& t) {
  std::uint64_t h = counter_hash(0x5bd1e995ull, std::hash<std::string>{}(name));
  if (!t.device().has_data()) return h;
  const Tensor host = t.to(Device::cpu());
  const auto* bytes = static_cast<const unsigned char*>(host.raw_data());
  const std::size_t n = host.nbytes();
  std::size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes + k, 8);
    h = counter_hash(h, word);
  }
  for (; k < n; ++k) h = counter_hash(h, bytes[k]);
  return h;
}

std::uint64_t ParamSet::combine_fingerprints(std::span<const std::uint64_t> parts) {
  std::uint64_t h = 0x5bd1e995ull;
  for (std::uint64_t p : parts) h = counter_hash(h, p);
  return h;
}

void init_param(Tensor& tensor, const ParamSpec& spec, std::uint64_t seed, std::uint64_t stream) {
  if (tensor.shape() != spec.shape) {
    throw std::invalid_argument("init_param: '" + spec.name + "' expects shape " +
                                shape_str(spec.shape) + ", got " + tensor.describe());
  }
  if (!tensor.device().has_data()) return;
  Tensor host = tensor.device().is_cpu() && tensor.dtype() == DType::f32
                    ? tensor
                    : Tensor::empty(tensor.shape(), DType::f32);
  float* p = host.data<float>();
  const std::int64_t n = host.numel();
  const std::uint64_t key = counter_hash(seed, stream);
  switch (spec.init) {
    case Init::zeros:
      for (std::int64_t i = 0; i < n; ++i) p[i] = 0.0f;
      break;
    case Init::ones:
      for (std::int64_t i = 0; i < n; ++i) p[i] = 1.0f;
      break;
    case Init::normal:
      for (std::int64_t i = 0; i < n; ++i) {
        p[i] = static_cast<float>(spec.scale * counter_normal(key, static_cast<std::uint64_t>(i)));
      }
      break;
    case Init::uniform_fan_in: {
      const float bound =
          spec.scale / std::sqrt(static_cast<float>(std::max<std::int64_t>(1, spec.fan_in)));
      for (std::int64_t i = 0; i < n; ++i) {
        p[i] = bound * (2.0f * counter_uniform_f32(key, static_cast<std::uint64_t>(i)) - 1.0f);
      }
      break;
    }
  }
  if (!host.shares_storage(tensor)) tensor.copy_from(host.to(tensor.dtype()));
}

std::optional<std::int64_t> first_non_finite(const Tensor& tensor) {
  if (tensor.numel() == 0) return std::nullopt;
  if (tensor.dtype() == DType::f32) {
    const float* v = tensor.data<float>();
    for (std::int64_t i = 0; i < tensor.numel(); ++i) {
      if (!std::isfinite(v[i])) return i;
    }
  } else if (tensor.dtype() == DType::bf16) {
    const BFloat16* v = tensor.data<BFloat16>();
    for (std::int64_t i = 0; i < tensor.numel(); ++i) {
      if (!std::isfinite(v[i].to_float())) return i;
    }
  }
  return std::nullopt;
}

std::optional<std::string> non_finite_value(const Tensor& tensor) {
  const std::optional<std::int64_t> at = first_non_finite(tensor);
  if (!at) return std::nullopt;
  const double value = tensor.dtype() == DType::f32 ? tensor.data<float>()[*at]
                                                    : tensor.data<BFloat16>()[*at].to_float();
  std::string shape;
  for (const std::int64_t d : tensor.shape()) {
    shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  }
  return std::string("holds ") +
         (std::isnan(value) ? "nan"
          : value > 0       ? "inf"
                            : "-inf") +
         " at element " + std::to_string(*at) + " of " + std::to_string(tensor.numel()) +
         " (shape [" + shape + "])";
}

std::optional<std::string> non_finite_entry(const ParamSet& set) {
  for (std::int64_t t = 0; t < set.size(); ++t) {
    if (std::optional<std::string> bad = non_finite_value(set[t])) {
      return "tensor '" + set.name(t) + "' " + *bad;
    }
  }
  return std::nullopt;
}

}  // namespace tandem::models
