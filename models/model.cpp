#include "models/model.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "models/concat_rows.hpp"
#include "models/detail/checks.hpp"
#include "models/detail/meta.hpp"
#include "models/detail/optimizer_util.hpp"
#include "models/detail/sim_ops.hpp"
#include "models/input_layout.hpp"
#include "runtime/counter_rng.hpp"

namespace tandem::models {
namespace {

std::string range_str(int begin, int end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// Throws unless [begin, end) lies in the model and `states` holds one saved state per layer.
void check_range(const char* who, int begin, int end, int layers, std::size_t states) {
  if (begin < 0 || end > layers || begin > end) {
    throw std::out_of_range(std::string(who) + ": range " + range_str(begin, end) + " outside " +
                            std::to_string(layers) + " layers");
  }
  if (states != static_cast<std::size_t>(end - begin)) {
    throw std::invalid_argument(std::string(who) + ": range " + range_str(begin, end) + " with " +
                                std::to_string(states) + " saved states");
  }
}

bool is_sim_state(const Saved& s) {
  for (const Tensor& t : s) {
    if (t.defined()) return t.device().is_sim();
  }
  return false;
}

// "Model::slice_saved layer 3 (linear(4->4)) saved tensor 1 (f32[2, 4] cpu)"
std::string saved_label(const char* who, int i, const Layer& l, std::size_t k, const Tensor& t) {
  return std::string(who) + " layer " + std::to_string(i) + " (" + l.describe() +
         ") saved tensor " + std::to_string(k) + " (" + t.describe() + ")";
}

// Rows of dimension 0 per sample of a `rows` tensor from a forward over `batch` samples.
std::int64_t rows_per_sample(const Tensor& t, std::int64_t batch, const std::string& label) {
  if (t.rank() == 0 || batch <= 0 || t.dim(0) % batch != 0) {
    throw std::invalid_argument(label + ": dimension 0 is not a multiple of the batch " +
                                std::to_string(batch));
  }
  return t.dim(0) / batch;
}

Shape record_shape(const Tensor& t, std::int64_t batch, const std::string& label) {
  Shape s = detail::decode_shape(t);
  if (s.empty() || s[0] != batch) {
    throw std::invalid_argument(label + ": records shape " + shape_str(s) + ", not one of " +
                                std::to_string(batch) + " samples");
  }
  return s;
}

}  // namespace

Model::Model(ModelSpec spec, std::vector<std::shared_ptr<const Layer>> layers,
             std::vector<std::vector<int>> sources,
             std::vector<std::vector<std::string>> implied_ties)
    : spec_(std::move(spec)), loss_(make_loss(spec_.loss)), layers_(std::move(layers)) {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i] == nullptr) {
      throw std::invalid_argument("Model: layer " + std::to_string(i) + " is null");
    }
  }
  link(std::move(sources));
  param_names_.resize(layers_.size());
  param_specs_.resize(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    param_specs_[i] = layers_[i]->param_specs();
    for (const ParamSpec& p : param_specs_[i]) {
      param_names_[i].push_back(param_name(static_cast<int>(i), p.name));
    }
  }
  std::vector<std::vector<std::string>> ties = spec_.ties;
  ties.insert(ties.end(), implied_ties.begin(), implied_ties.end());
  ties_ = resolve_ties(ties, param_names_, param_specs_);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    bool any = false;
    for (std::size_t j = 0; j < param_specs_[i].size(); ++j) {
      if (param_specs_[i][j].trainable) continue;
      buffers_.push_back(param_names_[i][j]);
      any = true;
    }
    if (any) buffer_layers_.push_back(static_cast<int>(i));
  }
  std::sort(buffers_.begin(), buffers_.end());
}

void Model::link(std::vector<std::vector<int>> sources) {
  const int n = num_layers();
  chain_ = sources.empty();
  if (chain_) {
    for (int i = 0; i < n; ++i) sources.push_back({i - 1});
  }
  if (static_cast<int>(sources.size()) != n) {
    throw std::invalid_argument("Model: " + std::to_string(sources.size()) + " source lists for " +
                                std::to_string(n) + " layers");
  }
  consumers_.assign(static_cast<std::size_t>(n) + 1, {});
  for (int i = 0; i < n; ++i) {
    const Layer& l = layer(i);
    const std::vector<int>& src = sources[static_cast<std::size_t>(i)];
    const std::string who = "Model: layer " + std::to_string(i) + " (" + l.describe() + ")";
    if (static_cast<int>(src.size()) != l.arity()) {
      throw std::invalid_argument(who + " reads " + std::to_string(l.arity()) + " tensors, given " +
                                  std::to_string(src.size()) + " sources");
    }
    for (const int from : src) {
      if (from < kModelInput || from >= i) {
        throw std::invalid_argument(who + " reads layer " + std::to_string(from) +
                                    ", which is not earlier");
      }
      std::vector<int>& c = consumers_[from == kModelInput ? static_cast<std::size_t>(n)
                                                           : static_cast<std::size_t>(from)];
      if (c.empty() || c.back() != i) c.push_back(i);
    }
  }
  for (int i = 0; i + 1 < n; ++i) {
    if (consumers_[static_cast<std::size_t>(i)].empty()) {
      throw std::invalid_argument("Model: layer " + std::to_string(i) + " (" + layer(i).describe() +
                                  ")'s output is never read");
    }
  }
  sources_ = std::move(sources);
}

const std::vector<int>& Model::sources(int i) const {
  (void)layer(i);  // range check
  return sources_[static_cast<std::size_t>(i)];
}

const std::vector<int>& Model::consumers(int producer) const {
  if (producer == kModelInput) return consumers_.back();
  (void)layer(producer);  // range check
  return consumers_[static_cast<std::size_t>(producer)];
}

std::vector<int> Model::range_inputs(int begin, int end) const {
  if (begin < 0 || end > num_layers() || begin >= end) {
    throw std::out_of_range("Model::range_inputs: range " + range_str(begin, end) + " of " +
                            std::to_string(num_layers()) + " layers");
  }
  std::vector<int> out;
  for (int i = begin; i < end; ++i) {
    for (const int from : sources_[static_cast<std::size_t>(i)]) {
      if (from < begin) out.push_back(from);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> Model::range_outputs(int begin, int end) const {
  if (begin < 0 || end > num_layers() || begin >= end) {
    throw std::out_of_range("Model::range_outputs: range " + range_str(begin, end) + " of " +
                            std::to_string(num_layers()) + " layers");
  }
  std::vector<int> out;
  for (int i = begin; i < end; ++i) {
    const std::vector<int>& c = consumers_[static_cast<std::size_t>(i)];
    if ((!c.empty() && c.back() >= end) || i == num_layers() - 1) out.push_back(i);
  }
  return out;
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
  if (spec_.name == "graph" || is_sequence_model(spec_.name)) {
    return InputLayout::of(spec_.graph).batch_shape(batch);
  }
  if (spec_.name == "gpt") return {batch, spec_.seq_len};
  if (is_image_model(spec_.name))
    return {batch, spec_.in_channels, spec_.image_size, spec_.image_size};
  throw std::invalid_argument("Model::input_shape: unknown model '" + spec_.name + "'");
}

DType Model::input_dtype() const {
  if (spec_.name == "graph" || is_sequence_model(spec_.name)) {
    return InputLayout::of(spec_.graph).dtype();
  }
  return layers_.empty() ? DType::f32 : layers_.front()->input_dtype();
}

Shape Model::target_shape(std::int64_t batch) const {
  if (layers_.empty()) return {batch};
  return loss_->target_shape(activation_shapes(batch).back());
}

Model Model::with_loss(LossPtr loss) const {
  if (loss == nullptr) throw std::invalid_argument("Model::with_loss: the loss is null");
  Model m = *this;
  m.spec_.loss = loss->name();
  m.loss_ = std::move(loss);
  return m;
}

Model Model::with_ties(const std::vector<std::vector<std::string>>& ties) const {
  // The groups already resolved come first (the model kind's implied ones are not in spec_.ties),
  // so every copy is checked against every tie, old and new.
  std::vector<std::vector<std::string>> all;
  for (const TieGroup& g : ties_) {
    std::vector<std::string> names;
    for (const TieCopy& c : g.copies) names.push_back(c.name);
    all.push_back(std::move(names));
  }
  all.insert(all.end(), ties.begin(), ties.end());
  Model m = *this;
  m.ties_ = resolve_ties(all, param_names_, param_specs_);
  m.spec_.ties.insert(m.spec_.ties.end(), ties.begin(), ties.end());
  return m;
}

std::vector<Shape> Model::activation_shapes(std::int64_t batch) const {
  std::vector<Shape> shapes;
  const Shape input = input_shape(batch);
  std::vector<Shape> in;
  for (int i = 0; i < num_layers(); ++i) {
    in.clear();
    for (const int from : sources_[static_cast<std::size_t>(i)]) {
      in.push_back(from == kModelInput ? input : shapes[static_cast<std::size_t>(from)]);
    }
    shapes.push_back(layer(i).output_shape_n(in));
  }
  return shapes;
}

std::vector<Shape> Model::input_shapes(std::int64_t batch) const {
  const std::vector<Shape> outputs = activation_shapes(batch);
  std::vector<Shape> out;
  for (int i = 0; i < num_layers(); ++i) {
    const int from = sources_[static_cast<std::size_t>(i)].front();
    out.push_back(from == kModelInput ? input_shape(batch)
                                      : outputs[static_cast<std::size_t>(from)]);
  }
  return out;
}

std::vector<double> Model::cut_elements(std::int64_t batch) const {
  const std::vector<Shape> outputs = activation_shapes(batch);
  auto numel = [](const Shape& s) {
    double n = 1;
    for (const auto d : s) n *= static_cast<double>(d);
    return n;
  };
  const int n = num_layers();
  std::vector<double> out(static_cast<std::size_t>(n), 0.0);
  if (n == 0) return out;
  out.back() = numel(outputs.back());
  // A tensor read last by layer j crosses every cut from its producer up to j.
  for (int p = kModelInput; p < n - 1; ++p) {
    const std::vector<int>& c = consumers(p);
    if (c.empty()) continue;
    const double e =
        numel(p == kModelInput ? input_shape(batch) : outputs[static_cast<std::size_t>(p)]);
    for (int cut = std::max(p, 0); cut < c.back() && cut < n - 1; ++cut) {
      out[static_cast<std::size_t>(cut)] += e;
    }
  }
  return out;
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
    const std::vector<ParamSpec>& specs = param_specs_[static_cast<std::size_t>(i)];
    for (std::size_t j = 0; j < specs.size(); ++j) {
      // The stream depends only on (layer, parameter): a stage gets the same values as the
      // whole model. A tied copy takes its leader's spec and stream, so every copy starts equal.
      std::size_t layer_of = static_cast<std::size_t>(i);
      std::size_t index = j;
      const std::string& name = param_names_[layer_of][j];
      for (const TieGroup& g : ties_) {
        if (g.find(name) != nullptr) {
          layer_of = static_cast<std::size_t>(g.copies[0].layer);
          index = g.copies[0].index;
        }
      }
      const ParamSpec& spec = param_specs_[layer_of][index];
      Tensor t = Tensor::empty(spec.shape, DType::f32, device);
      init_param(t, spec, seed, counter_hash(static_cast<std::uint64_t>(layer_of), index));
      params.add(name, t);
    }
  }
  return params;
}

// The index of layer i's first parameter in `params`, checked contiguous; -1: it has none.
std::int64_t Model::first_param(const ParamSet& params, int i) const {
  (void)layer(i);  // range check
  const std::vector<std::string>& names = param_names_[static_cast<std::size_t>(i)];
  if (names.empty()) return -1;
  const std::int64_t first = params.index_of(names[0]);
  const auto count = static_cast<std::int64_t>(names.size());
  for (std::int64_t j = 1; j < count; ++j) {
    if (first + j >= params.size() ||
        params.name(first + j) != names[static_cast<std::size_t>(j)]) {
      throw std::invalid_argument("Model::layer_params: parameters of layer " + std::to_string(i) +
                                  " are not contiguous in the set (missing '" +
                                  names[static_cast<std::size_t>(j)] + "')");
    }
  }
  return first;
}

bool Model::is_buffer(std::string_view name) const {
  return std::binary_search(buffers_.begin(), buffers_.end(), name);
}

void Model::update_buffers(const Kernels& k, ParamSet& params, const ParamSet& grads) const {
  for (const int l : buffer_layers_) {
    const auto li = static_cast<std::size_t>(l);
    const std::vector<std::string>& names = param_names_[li];
    if (!params.contains(names[0])) continue;
    const std::int64_t first = first_param(params, l);
    const std::int64_t gfirst = first_param(grads, l);
    std::vector<Tensor> old;
    std::vector<Tensor> out;
    for (std::size_t j = 0; j < names.size(); ++j) {
      const std::int64_t at = first + static_cast<std::int64_t>(j);
      if (param_specs_[li][j].trainable) {
        old.push_back(params[at]);
        out.push_back(params[at]);
        continue;
      }
      const detail::UpdateTarget t = detail::update_target(params, at, k);
      old.push_back(t.old);
      out.push_back(t.out);
    }
    layers_[li]->update_buffers(k, old,
                                grads.range(gfirst, static_cast<std::int64_t>(names.size())), out);
  }
}

ParamView Model::layer_params(const ParamSet& params, int i) const {
  const std::int64_t first = first_param(params, i);
  if (first < 0) return {};
  return params.range(first,
                      static_cast<std::int64_t>(param_names_[static_cast<std::size_t>(i)].size()));
}

std::span<Tensor> Model::layer_params(ParamSet& params, int i) const {
  const std::int64_t first = first_param(params, i);
  if (first < 0) return {};
  return params.range(first,
                      static_cast<std::int64_t>(param_names_[static_cast<std::size_t>(i)].size()));
}

Model::RangeForward Model::forward(const Context& ctx, const ParamSet& params, const Tensor& x,
                                   int begin, int end) const {
  if (begin < 0 || end > num_layers() || begin > end) {
    throw std::out_of_range("Model::forward: range [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") outside " + std::to_string(num_layers()) +
                            " layers");
  }
  if (begin < end && !plain_range(begin, end)) {
    const std::size_t reads = range_inputs(begin, end).size();
    if (reads != 1) {
      throw std::invalid_argument("Model::forward: range " + range_str(begin, end) + " reads " +
                                  std::to_string(reads) + " tensors, given one");
    }
    return forward(ctx, params, std::span<const Tensor>(&x, 1), begin, end);
  }
  RangeForward out;
  out.y = x;
  out.saved.reserve(static_cast<std::size_t>(end - begin));
  for (int i = begin; i < end; ++i) {
    const Layer& l = layer(i);
    const ParamView p = layer_params(params, i);
    using Role = detail::OpDevices::Role;
    detail::OpDevices devices("forward", i, l, param_specs_[static_cast<std::size_t>(i)]);
    devices.add(Role::input, out.y);
    devices.add(Role::parameter, p);
    ForwardResult r =
        devices.sim() ? detail::sim_forward(devices, ctx, p, out.y) : l.forward(ctx, p, out.y);
    out.y = std::move(r.y);
    out.saved.push_back(std::move(r.saved));
  }
  out.outputs.push_back(out.y);
  return out;
}

bool Model::plain_range(int begin, int end) const {
  return chain_ || (end - begin == 1 && layer(begin).arity() == 1);
}

std::span<const Tensor> Model::single(const Tensor& dy, int begin, int end) const {
  const std::size_t reads = range_inputs(begin, end).size();
  const std::size_t gives = range_outputs(begin, end).size();
  if (reads != 1 || gives != 1) {
    throw std::invalid_argument("Model::backward: range " + range_str(begin, end) + " reads " +
                                std::to_string(reads) + " and gives " + std::to_string(gives) +
                                " tensors; the one-tensor call needs one of each");
  }
  return {&dy, 1};
}

Model::RangeForward Model::forward(const Context& ctx, const ParamSet& params,
                                   std::span<const Tensor> inputs, int begin, int end) const {
  const std::vector<int> reads = range_inputs(begin, end);
  if (inputs.size() != reads.size()) {
    throw std::invalid_argument("Model::forward: range " + range_str(begin, end) + " reads " +
                                std::to_string(reads.size()) + " tensors, given " +
                                std::to_string(inputs.size()));
  }
  // Every value the range reads: its inputs, then its own layers' outputs (each dropped after
  // its last reader in the range unless a later range reads it).
  std::vector<Tensor> values(static_cast<std::size_t>(end - begin));
  auto value = [&](int from) -> const Tensor& {
    if (from >= begin) return values[static_cast<std::size_t>(from - begin)];
    const auto at = std::lower_bound(reads.begin(), reads.end(), from) - reads.begin();
    return inputs[static_cast<std::size_t>(at)];
  };
  const std::vector<int> outs = range_outputs(begin, end);
  RangeForward out;
  out.saved.reserve(static_cast<std::size_t>(end - begin));
  std::vector<Tensor> xs;
  for (int i = begin; i < end; ++i) {
    const Layer& l = layer(i);
    const ParamView p = layer_params(params, i);
    xs.clear();
    for (const int from : sources_[static_cast<std::size_t>(i)]) xs.push_back(value(from));
    using Role = detail::OpDevices::Role;
    detail::OpDevices devices("forward", i, l, param_specs_[static_cast<std::size_t>(i)]);
    devices.add(Role::input, xs);
    devices.add(Role::parameter, p);
    ForwardResult r;
    if (devices.sim()) {
      r = l.arity() == 1 ? detail::sim_forward(devices, ctx, p, xs[0])
                         : detail::sim_forward_n(devices, ctx, xs);
    } else {
      r = l.arity() == 1 ? l.forward(ctx, p, xs[0]) : l.forward_n(ctx, p, xs);
    }
    values[static_cast<std::size_t>(i - begin)] = std::move(r.y);
    out.saved.push_back(std::move(r.saved));
    // Inputs read for the last time in this range are dropped.
    for (const int from : sources_[static_cast<std::size_t>(i)]) {
      if (from < begin) continue;
      const std::vector<int>& c = consumers_[static_cast<std::size_t>(from)];
      const bool later = std::any_of(c.begin(), c.end(), [&](int j) { return j > i; });
      if (!later) values[static_cast<std::size_t>(from - begin)] = Tensor();
    }
  }
  for (const int o : outs) out.outputs.push_back(values[static_cast<std::size_t>(o - begin)]);
  out.y = out.outputs.back();
  return out;
}

std::vector<Tensor> Model::backward(const Context& ctx, const ParamSet& params,
                                    std::vector<Saved>& saved, std::span<const Tensor> dys,
                                    int begin, int end, ParamSet& grads, float alpha,
                                    float beta) const {
  return graph_backward(ctx, params, saved, dys, begin, end, &grads, alpha, beta, false);
}

std::vector<Tensor> Model::backward_input(const Context& ctx, const ParamSet& params,
                                          std::vector<Saved>& saved, std::span<const Tensor> dys,
                                          int begin, int end) const {
  return graph_backward(ctx, params, saved, dys, begin, end, nullptr, 1.0f, 0.0f, true);
}

std::vector<Tensor> Model::graph_backward(const Context& ctx, const ParamSet& params,
                                          std::vector<Saved>& saved, std::span<const Tensor> dys,
                                          int begin, int end, ParamSet* grads, float alpha,
                                          float beta, bool split) const {
  const char* who = split ? "Model::backward_input" : "Model::backward";
  check_range(who, begin, end, num_layers(), saved.size());
  const std::vector<int> reads = range_inputs(begin, end);
  const std::vector<int> outs = range_outputs(begin, end);
  if (dys.size() != outs.size()) {
    throw std::invalid_argument(std::string(who) + ": range " + range_str(begin, end) + " gives " +
                                std::to_string(outs.size()) + " tensors, given " +
                                std::to_string(dys.size()) + " gradients");
  }
  // The gradient reaching each layer's output, and each range input, summed as it arrives.
  // Gradients of later ranges come first: their readers are later layers.
  std::vector<Tensor> acc(static_cast<std::size_t>(end - begin));
  std::vector<Tensor> dx(reads.size());
  for (std::size_t q = 0; q < outs.size(); ++q) {
    acc[static_cast<std::size_t>(outs[q] - begin)] = dys[q];
  }
  auto add_to = [&](Tensor& slot, const Tensor& d) {
    if (!d.defined()) return;
    if (!slot.defined() || slot.device().is_sim()) {
      if (!slot.defined()) slot = d;
      return;
    }
    const Kernels& k = ctx.k();
    Tensor sum = k.empty(slot.shape());
    k.add(detail::ptr(slot), detail::ptr(d), detail::ptr(sum), sum.numel());
    slot = std::move(sum);
  };
  for (int i = end - 1; i >= begin; --i) {
    Tensor g = std::move(acc[static_cast<std::size_t>(i - begin)]);
    if (!g.defined()) {
      throw std::invalid_argument(std::string(who) + ": no gradient reached layer " +
                                  std::to_string(i) + " (" + layer(i).describe() + ")");
    }
    Saved& st = saved[static_cast<std::size_t>(i - begin)];
    const std::vector<Tensor> d = layer_backward(ctx, params, st, g, i, grads, alpha, beta, split);
    const std::vector<int>& src = sources_[static_cast<std::size_t>(i)];
    for (std::size_t k = 0; k < src.size(); ++k) {
      if (src[k] == kModelInput) continue;
      if (src[k] >= begin) {
        add_to(acc[static_cast<std::size_t>(src[k] - begin)], d[k]);
      } else {
        const auto at = std::lower_bound(reads.begin(), reads.end(), src[k]) - reads.begin();
        add_to(dx[static_cast<std::size_t>(at)], d[k]);
      }
    }
  }
  return dx;
}

std::vector<Tensor> Model::layer_backward(const Context& ctx, const ParamSet& params, Saved& s,
                                          const Tensor& g, int i, ParamSet* grads, float alpha,
                                          float beta, bool split) const {
  const Layer& l = layer(i);
  const ParamView p = layer_params(params, i);
  const std::vector<int>& src = sources_[static_cast<std::size_t>(i)];
  std::vector<bool> want(src.size());
  for (std::size_t k = 0; k < src.size(); ++k) want[k] = src[k] != kModelInput;
  using Role = detail::OpDevices::Role;
  detail::OpDevices devices(split ? "backward_input" : "backward", i, l,
                            param_specs_[static_cast<std::size_t>(i)]);
  devices.add(Role::output_gradient, g);
  devices.add(Role::parameter, p);
  devices.add(Role::saved, s);
  if (l.arity() > 1) {
    std::vector<Tensor> d = devices.sim() ? detail::sim_backward_input_n(devices, ctx, s, g, want)
                                          : l.backward_input_n(ctx, p, s, g, want);
    if (devices.specs().empty()) {  // add, concat, multiply: B is all there is
      s.clear();
      return d;
    }
    // A merge with weights (seq_attention): W reads what B left and the output gradient, last,
    // as for one input; the fused backward runs W at once.
    s.push_back(g);
    if (!split) {
      layer_weight(ctx, s, i, *grads, alpha, beta);
      s.clear();
    }
    return d;
  }
  std::vector<Tensor> d(1);
  if (split) {
    std::vector<Saved> one(1);
    one[0] = std::move(s);
    d[0] = backward_input(ctx, params, one, g, i, i + 1, want[0]);
    s = std::move(one[0]);
  } else {
    std::vector<Saved> one(1);
    one[0] = std::move(s);
    d[0] = backward(ctx, params, one, g, i, i + 1, want[0], *grads, alpha, beta);
    s = std::move(one[0]);
  }
  return d;
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
  if (!plain_range(begin, end)) {
    std::vector<Tensor> d = graph_backward(ctx, params, saved, single(dy, begin, end), begin, end,
                                           &grads, alpha, beta, false);
    return need_dx ? d.front() : Tensor();
  }
  Tensor g = dy;
  for (int i = end - 1; i >= begin; --i) {
    Saved& s = saved[static_cast<std::size_t>(i - begin)];
    const Layer& l = layer(i);
    const ParamView p = layer_params(params, i);
    const GradSink sink{layer_params(grads, i), alpha, beta};
    using Role = detail::OpDevices::Role;
    detail::OpDevices devices("backward", i, l, param_specs_[static_cast<std::size_t>(i)]);
    devices.add(Role::output_gradient, g);
    devices.add(Role::parameter, p);
    devices.add(Role::gradient, sink.grads);
    devices.add(Role::saved, s);
    const bool dx = need_dx || i > begin;
    g = devices.sim() ? detail::sim_backward(devices, ctx, p, s, g, dx, sink)
                      : l.backward_into(ctx, p, s, g, dx, sink);
    s.clear();  // activations are dead once their layer's backward ran
  }
  return g;
}

Tensor Model::backward_input(const Context& ctx, const ParamSet& params, std::vector<Saved>& saved,
                             const Tensor& dy, int begin, int end, bool need_dx) const {
  check_range("Model::backward_input", begin, end, num_layers(), saved.size());
  if (!plain_range(begin, end)) {
    std::vector<Tensor> d = graph_backward(ctx, params, saved, single(dy, begin, end), begin, end,
                                           nullptr, 1.0f, 0.0f, true);
    return need_dx ? d.front() : Tensor();
  }
  Tensor g = dy;
  for (int i = end - 1; i >= begin; --i) {
    Saved& s = saved[static_cast<std::size_t>(i - begin)];
    const Layer& l = layer(i);
    const ParamView p = layer_params(params, i);
    using Role = detail::OpDevices::Role;
    detail::OpDevices devices("backward_input", i, l, param_specs_[static_cast<std::size_t>(i)]);
    devices.add(Role::output_gradient, g);
    devices.add(Role::parameter, p);
    devices.add(Role::saved, s);
    const bool dx = need_dx || i > begin;
    const bool weights = !devices.specs().empty();
    if (devices.sim()) {
      // Keeps {input, dy} for every layer: W charges backward_weight_ms for every layer, as the
      // fused path does.
      g = detail::sim_backward_input(devices, ctx, p, s, g, dx);
      continue;
    }
    if (weights && s.empty()) {
      // Caught here, not in W, where it would look like W's fault.
      throw std::invalid_argument(devices.op() +
                                  ": no saved state (forward run without ctx.keep_saved, or "
                                  "its state already released?)");
    }
    Tensor out;
    // The first layer's input gradient is skipped as in the fused path, unless W needs what
    // B appends.
    if (dx || (weights && l.weight_needs_backward_input())) out = l.backward_input(ctx, p, s, g);
    if (weights) {
      s.push_back(g);  // W's output gradient, last
    } else {
      s.clear();  // nothing left to do for this layer
    }
    g = dx ? out : Tensor();
  }
  return g;
}

void Model::backward_weight(const Context& ctx, std::vector<Saved>& saved, int begin, int end,
                            ParamSet& grads, float alpha, float beta) const {
  check_range("Model::backward_weight", begin, end, num_layers(), saved.size());
  for (int i = end - 1; i >= begin; --i) {
    Saved& s = saved[static_cast<std::size_t>(i - begin)];
    if (layer(i).arity() > 1 && param_specs_[static_cast<std::size_t>(i)].empty()) {
      s.clear();  // a merge without weights: B left nothing
      continue;
    }
    layer_weight(ctx, s, i, grads, alpha, beta);
    s.clear();
  }
}

void Model::layer_weight(const Context& ctx, Saved& s, int i, ParamSet& grads, float alpha,
                         float beta) const {
  const Layer& l = layer(i);
  const GradSink sink{layer_params(grads, i), alpha, beta};
  using Role = detail::OpDevices::Role;
  detail::OpDevices devices("backward_weight", i, l, param_specs_[static_cast<std::size_t>(i)]);
  devices.add(Role::gradient, sink.grads);
  devices.add(Role::saved, s);
  if (devices.sim()) {
    detail::sim_backward_weight(devices, ctx, s, sink);
  } else if (!devices.specs().empty()) {
    if (s.empty() || !s.back().defined()) {
      throw std::invalid_argument(devices.op() +
                                  ": no output gradient in the saved state (backward_input "
                                  "not run on it, or its state already released?)");
    }
    const Tensor dy = s.back();
    s.pop_back();
    l.backward_weight_into(ctx, s, dy, sink);
  }
}

std::vector<Saved> Model::slice_saved(const std::vector<Saved>& saved, int begin, int end,
                                      std::int64_t batch, std::int64_t lo, std::int64_t hi) const {
  check_range("Model::slice_saved", begin, end, num_layers(), saved.size());
  if (batch <= 0 || lo < 0 || hi > batch || lo >= hi) {
    throw std::invalid_argument("Model::slice_saved: samples [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + ") are not a non-empty part of a batch of " +
                                std::to_string(batch));
  }
  std::vector<Saved> out(saved.size());
  for (int i = begin; i < end; ++i) {
    const Layer& l = layer(i);
    const Saved& s = saved[static_cast<std::size_t>(i - begin)];
    const bool sim = is_sim_state(s);
    Saved& o = out[static_cast<std::size_t>(i - begin)];
    o.reserve(s.size());
    for (std::size_t k = 0; k < s.size(); ++k) {
      const Tensor& t = s[k];
      if (!t.defined()) {
        o.emplace_back();
        continue;
      }
      const std::string label = saved_label("Model::slice_saved", i, l, k, t);
      switch (sim ? SavedLayout::rows : l.saved_layout(k)) {
        case SavedLayout::rows: {
          const std::int64_t r = rows_per_sample(t, batch, label);
          o.push_back(t.slice(lo * r, hi * r));
          break;
        }
        case SavedLayout::shape_record: {
          Shape shape = record_shape(t, batch, label);
          shape[0] = hi - lo;
          o.push_back(detail::encode_shape(shape));
          break;
        }
        case SavedLayout::dropout_record: {
          detail::DropoutKey key = detail::decode_dropout(t);
          key.first_sample += lo;  // masks are indexed by the sample's place in the minibatch
          o.push_back(detail::encode_dropout(key));
          break;
        }
        case SavedLayout::not_splittable:
          throw std::invalid_argument(label + ": depends on the whole batch; cannot be sliced");
      }
    }
  }
  return out;
}

std::vector<Saved> Model::concat_saved(std::span<const std::vector<Saved>> parts,
                                       std::span<const std::int64_t> batches, int begin, int end,
                                       const Kernels& kernels) const {
  if (parts.empty() || parts.size() != batches.size()) {
    throw std::invalid_argument("Model::concat_saved: " + std::to_string(parts.size()) +
                                " parts with " + std::to_string(batches.size()) +
                                " sample counts (need as many, at least one)");
  }
  for (std::size_t j = 0; j < parts.size(); ++j) {
    check_range("Model::concat_saved", begin, end, num_layers(), parts[j].size());
    if (batches[j] <= 0) {
      throw std::invalid_argument("Model::concat_saved: part " + std::to_string(j) + " has " +
                                  std::to_string(batches[j]) + " samples");
    }
  }
  if (parts.size() == 1) return parts.front();
  std::vector<Saved> out(static_cast<std::size_t>(end - begin));
  for (int i = begin; i < end; ++i) {
    const auto at = static_cast<std::size_t>(i - begin);
    const Layer& l = layer(i);
    const Saved& first = parts.front()[at];
    for (std::size_t j = 1; j < parts.size(); ++j) {
      if (parts[j][at].size() != first.size()) {
        throw std::invalid_argument(
            "Model::concat_saved: layer " + std::to_string(i) + " (" + l.describe() + ") keeps " +
            std::to_string(first.size()) + " saved tensors in part 0 but " +
            std::to_string(parts[j][at].size()) + " in part " + std::to_string(j));
      }
    }
    const bool sim = is_sim_state(first);
    Saved& o = out[at];
    o.reserve(first.size());
    for (std::size_t k = 0; k < first.size(); ++k) {
      std::vector<Tensor> ts;
      for (const auto& part : parts) ts.push_back(part[at][k]);
      if (!ts.front().defined()) {
        for (std::size_t j = 1; j < ts.size(); ++j) {
          if (ts[j].defined()) {
            throw std::invalid_argument(saved_label("Model::concat_saved", i, l, k, ts[j]) +
                                        " in part " + std::to_string(j) +
                                        " is defined but undefined in part 0");
          }
        }
        o.emplace_back();
        continue;
      }
      for (std::size_t j = 1; j < ts.size(); ++j) {
        if (!ts[j].defined()) {
          throw std::invalid_argument(saved_label("Model::concat_saved", i, l, k, ts.front()) +
                                      " is undefined in part " + std::to_string(j));
        }
      }
      const std::string label = saved_label("Model::concat_saved", i, l, k, ts.front());
      switch (sim ? SavedLayout::rows : l.saved_layout(k)) {
        case SavedLayout::rows: {
          const std::int64_t r = rows_per_sample(ts[0], batches[0], label);
          for (std::size_t j = 1; j < ts.size(); ++j) {
            const std::string lj = saved_label("Model::concat_saved", i, l, k, ts[j]);
            if (rows_per_sample(ts[j], batches[j], lj) != r) {
              throw std::invalid_argument(lj + " in part " + std::to_string(j) + " has " +
                                          std::to_string(ts[j].dim(0) / batches[j]) +
                                          " rows per sample, part 0 has " + std::to_string(r));
            }
          }
          // Sim tensors have no data: the runtime's join gives the shape.
          o.push_back(sim ? tandem::concat_rows(ts) : models::concat_rows(kernels, ts));
          break;
        }
        case SavedLayout::shape_record: {
          Shape shape = record_shape(ts[0], batches[0], label);
          for (std::size_t j = 1; j < ts.size(); ++j) {
            const std::string lj = saved_label("Model::concat_saved", i, l, k, ts[j]);
            Shape sj = record_shape(ts[j], batches[j], lj);
            if (!std::equal(sj.begin() + 1, sj.end(), shape.begin() + 1, shape.end())) {
              throw std::invalid_argument(lj + " in part " + std::to_string(j) + " records " +
                                          shape_str(sj) + ", part 0 " + shape_str(shape) +
                                          " (only dimension 0 may differ)");
            }
            shape[0] += sj[0];
          }
          o.push_back(detail::encode_shape(shape));
          break;
        }
        case SavedLayout::dropout_record: {
          const detail::DropoutKey key = detail::decode_dropout(ts[0]);
          std::int64_t next = key.first_sample + batches[0];
          for (std::size_t j = 1; j < ts.size(); ++j) {
            const detail::DropoutKey kj = detail::decode_dropout(ts[j]);
            // One forward over the joined samples would have used one key and consecutive
            // sample indices; anything else has masks no single forward makes.
            if (kj.key != key.key || kj.first_sample != next) {
              throw std::invalid_argument(
                  saved_label("Model::concat_saved", i, l, k, ts[j]) + " in part " +
                  std::to_string(j) + ": dropout masks of sample " +
                  std::to_string(kj.first_sample) + (kj.key != key.key ? " of another step" : "") +
                  " do not continue the previous part (next sample " + std::to_string(next) + ")");
            }
            next += batches[j];
          }
          o.push_back(ts[0]);
          break;
        }
        case SavedLayout::not_splittable:
          throw std::invalid_argument(label + ": depends on the whole batch; cannot be joined");
      }
    }
  }
  return out;
}

}  // namespace tandem::models
