#include "models/model.hpp"

#include <sstream>
#include <stdexcept>

#include "models/detail/random.hpp"
#include "models/detail/sim_ops.hpp"

namespace tandem::models {

Model::Model(ModelSpec spec, std::vector<std::shared_ptr<const Layer>> layers)
    : spec_(std::move(spec)), layers_(std::move(layers)) {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i] == nullptr) {
      throw std::invalid_argument("Model: layer " + std::to_string(i) + " is null");
    }
  }
}

const Layer& Model::layer(int i) const {
  if (i < 0 || i >= num_layers()) {
    throw std::out_of_range("Model::layer(" + std::to_string(i) + "): model has " +
                            std::to_string(num_layers()) + " layers");
  }
  return *layers_[static_cast<std::size_t>(i)];
}

std::string Model::describe() const {
  std::ostringstream s;
  s << spec_.describe() << "\n";
  for (int i = 0; i < num_layers(); ++i) {
    s << "  " << i << ": " << layer(i).describe() << "  (" << layer(i).param_numel()
      << " parameters)\n";
  }
  return s.str();
}

Shape Model::input_shape(std::int64_t batch) const {
  if (spec_.name == "mlp") return {batch, spec_.widths.at(0)};
  if (spec_.name == "gpt") return {batch, spec_.seq_len};
  if (spec_.name == "vgg16") return {batch, spec_.in_channels, spec_.image_size, spec_.image_size};
  throw std::invalid_argument("Model::input_shape: unknown model '" + spec_.name + "'");
}

DType Model::input_dtype() const {
  return layers_.empty() ? DType::f32 : layers_.front()->input_dtype();
}

Shape Model::target_shape(std::int64_t batch) const {
  if (spec_.name == "gpt") return {batch, spec_.seq_len};
  return {batch};
}

std::vector<Shape> Model::activation_shapes(std::int64_t batch) const {
  std::vector<Shape> shapes;
  Shape s = input_shape(batch);
  for (const auto& l : layers_) {
    s = l->output_shape(s);
    shapes.push_back(s);
  }
  return shapes;
}

std::string Model::param_name(int layer, const std::string& local) const {
  return std::to_string(layer) + "." + local;
}

ParamSet Model::init_params(std::uint64_t seed, Device device) const {
  return init_params(seed, 0, num_layers(), device);
}

ParamSet Model::init_params(std::uint64_t seed, int begin, int end, Device device) const {
  if (begin < 0 || end > num_layers() || begin > end) {
    throw std::out_of_range("Model::init_params: range [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") outside " + std::to_string(num_layers()) +
                            " layers");
  }
  ParamSet params;
  for (int i = begin; i < end; ++i) {
    const std::vector<ParamSpec> specs = layer(i).param_specs();
    for (std::size_t j = 0; j < specs.size(); ++j) {
      Tensor t = Tensor::empty(specs[j].shape, DType::f32, device);
      // The stream depends only on (layer, parameter): a stage gets the same values as the
      // whole model.
      init_param(t, specs[j], seed, detail::hash_combine(static_cast<std::uint64_t>(i), j));
      params.add(param_name(i, specs[j].name), t);
    }
  }
  return params;
}

ParamView Model::layer_params(const ParamSet& params, int i) const {
  const std::vector<ParamSpec> specs = layer(i).param_specs();
  if (specs.empty()) return {};
  const std::int64_t first = params.index_of(param_name(i, specs[0].name));
  const auto count = static_cast<std::int64_t>(specs.size());
  for (std::int64_t j = 1; j < count; ++j) {
    if (first + j >= params.size() ||
        params.name(first + j) != param_name(i, specs[static_cast<std::size_t>(j)].name)) {
      throw std::invalid_argument("Model::layer_params: parameters of layer " + std::to_string(i) +
                                  " are not contiguous in the set (missing '" +
                                  param_name(i, specs[static_cast<std::size_t>(j)].name) + "')");
    }
  }
  return params.range(first, count);
}

std::span<Tensor> Model::layer_params(ParamSet& params, int i) const {
  const ParamView view = layer_params(static_cast<const ParamSet&>(params), i);
  if (view.empty()) return {};
  return params.range(params.index_of(param_name(i, layer(i).param_specs()[0].name)),
                      static_cast<std::int64_t>(view.size()));
}

Model::RangeForward Model::forward(const Context& ctx, const ParamSet& params, const Tensor& x,
                                   int begin, int end) const {
  if (begin < 0 || end > num_layers() || begin > end) {
    throw std::out_of_range("Model::forward: range [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") outside " + std::to_string(num_layers()) +
                            " layers");
  }
  RangeForward out;
  out.y = x;
  out.saved.reserve(static_cast<std::size_t>(end - begin));
  for (int i = begin; i < end; ++i) {
    const Layer& l = layer(i);
    const ParamView p = layer_params(params, i);
    using Role = detail::OpDevices::Role;
    detail::OpDevices devices("forward", i, l);
    devices.add(Role::input, out.y);
    devices.add(Role::parameter, p);
    ForwardResult r = devices.sim() ? detail::sim_forward(l, i, ctx, p, out.y, devices.op())
                                    : l.forward(ctx, p, out.y);
    out.y = std::move(r.y);
    out.saved.push_back(std::move(r.saved));
  }
  return out;
}

Tensor Model::backward(const Context& ctx, const ParamSet& params, std::vector<Saved>& saved,
                       const Tensor& dy, int begin, int end, bool need_dx, ParamSet& grads,
                       float alpha, float beta) const {
  if (begin < 0 || end > num_layers() || begin > end ||
      saved.size() != static_cast<std::size_t>(end - begin)) {
    throw std::invalid_argument("Model::backward: range [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") with " + std::to_string(saved.size()) +
                                " saved states");
  }
  Tensor g = dy;
  for (int i = end - 1; i >= begin; --i) {
    Saved& s = saved[static_cast<std::size_t>(i - begin)];
    const Layer& l = layer(i);
    const ParamView p = layer_params(params, i);
    const GradSink sink{layer_params(grads, i), alpha, beta};
    using Role = detail::OpDevices::Role;
    detail::OpDevices devices("backward", i, l);
    devices.add(Role::output_gradient, g);
    devices.add(Role::parameter, p);
    devices.add(Role::gradient, sink.grads);
    devices.add(Role::saved, s);
    const bool dx = need_dx || i > begin;
    g = devices.sim() ? detail::sim_backward(l, i, ctx, p, s, g, dx, sink, devices.op())
                      : l.backward_into(ctx, p, s, g, dx, sink);
    s.clear();  // activations are dead once their layer's backward ran
  }
  return g;
}

}  // namespace tandem::models
