// What a pipeline stage does with a model's layer range must be the single-device computation
// cut differently: stages compose ([0, k) then [k, n)), B then W equals the fused backward,
// a re-materialized forward recomputes exactly what a kept one saved, and UMPIPE's re-slicing
// (saved state of forward slices joined and cut into other backward slices) gives the
// whole-batch gradients. Each check is also shown to fail on a deliberately wrong state.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "grad_check.hpp"
#include "models/layers/activation.hpp"
#include "models/layers/attention.hpp"
#include "models/layers/conv2d.hpp"
#include "models/layers/dropout.hpp"
#include "models/layers/embedding.hpp"
#include "models/layers/flatten.hpp"
#include "models/layers/layer_norm.hpp"
#include "models/layers/linear.hpp"
#include "models/layers/max_pool2d.hpp"
#include "models/layers/transformer_block.hpp"
#include "models/model.hpp"
#include "models/sim_clock.hpp"

namespace tandem::models {
namespace {

using testing::random_tensor;

constexpr std::uint64_t kSeed = 11;

Tensor random_ids(const Shape& shape, std::int64_t vocab, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::i32);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7919 + seed * 104729) % vocab);
  }
  return t;
}

Tensor input_for(const Model& m, std::int64_t batch, std::uint64_t seed) {
  if (m.spec().name == "gpt") return random_ids(m.input_shape(batch), m.spec().vocab, seed);
  return random_tensor(m.input_shape(batch), seed);
}

Context train_ctx(std::int64_t sample_begin = 0) {
  return Context{true, kSeed, sample_begin};
}

// Largest |want - got| over the largest |want| (0 when both are undefined, infinite when they
// do not even have the same shape).
double rel_error(const Tensor& want, const Tensor& got) {
  if (want.defined() != got.defined()) return std::numeric_limits<double>::infinity();
  if (!want.defined()) return 0;
  if (want.shape() != got.shape()) return std::numeric_limits<double>::infinity();
  const std::vector<float> a = want.to_float_vector();
  const std::vector<float> b = got.to_float_vector();
  double worst = 0, scale = 1e-12;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
  }
  return worst / scale;
}

double rel_error(const ParamSet& want, const ParamSet& got) {
  double worst = 0;
  for (std::int64_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, rel_error(want[i], got.at(want.name(i))));
  }
  return worst;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || (a.shape() == b.shape() && a.to_float_vector() == b.to_float_vector());
}

void expect_same_bits(const ParamSet& want, const ParamSet& got, const std::string& where) {
  ASSERT_EQ(want.names(), got.names()) << where;
  for (std::int64_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(same_bits(want[i], got[i])) << where << ": " << want.name(i);
  }
}

bool all_released(const std::vector<Saved>& saved) {
  for (const Saved& s : saved) {
    for (const Tensor& t : s) {
      if (t.defined()) return false;
    }
  }
  return true;
}

ModelSpec tiny_gpt() {
  ModelSpec s = gpt_spec(2, 16, 2, 6, 11);
  s.dropout = 0.2f;  // masks must survive every cut
  return s;
}

ModelSpec small_vgg() {
  ModelSpec s = vgg16_small_spec(7);
  s.width_mult = 1.0 / 16;
  s.dropout = 0.3f;
  return s;
}

class StageSplit : public ::testing::TestWithParam<ModelSpec> {};

// (a) Forward [0, k) then [k, n) is forward [0, n); backward [k, n) then [0, k) gives the
// whole model's gradients and input gradient, bit for bit.
TEST_P(StageSplit, StagesComposeToTheWholeModel) {
  const Model m = Model::build(GetParam());
  const int n = m.num_layers();
  const ParamSet p = m.init_params(3);
  const std::int64_t batch = 3;
  const Tensor x = input_for(m, batch, 5);
  const Context ctx = train_ctx();
  Model::RangeForward whole = m.forward(ctx, p, x, 0, n);
  const Tensor dy = random_tensor(whole.y.shape(), 7);
  ParamSet whole_grads = p.zeros_like();
  const Tensor whole_dx = m.backward(ctx, p, whole.saved, dy, 0, n, true, whole_grads);
  EXPECT_TRUE(all_released(whole.saved));

  for (const int k : {1, n / 2, n - 1}) {
    const std::string where = "cut at " + std::to_string(k);
    Model::RangeForward a = m.forward(ctx, p, x, 0, k);
    Model::RangeForward b = m.forward(ctx, p, a.y, k, n);
    EXPECT_TRUE(same_bits(b.y, whole.y)) << where;
    ParamSet grads = p.zeros_like();
    const Tensor mid = m.backward(ctx, p, b.saved, dy, k, n, true, grads);
    ASSERT_TRUE(mid.defined()) << where;
    EXPECT_EQ(mid.shape(), a.y.shape()) << where;
    const Tensor dx = m.backward(ctx, p, a.saved, mid, 0, k, true, grads);
    EXPECT_TRUE(same_bits(dx, whole_dx)) << where;
    expect_same_bits(whole_grads, grads, where);
  }
}

// (b) backward_input then backward_weight equals the fused backward over a range, with and
// without the range's input gradient, for fresh (beta 0) and accumulated (alpha, beta) sinks.
TEST_P(StageSplit, InputThenWeightEqualsFusedBackward) {
  const Model m = Model::build(GetParam());
  const int n = m.num_layers();
  const ParamSet p = m.init_params(3);
  const std::int64_t batch = 3;
  const Context ctx = train_ctx();
  const Model::RangeForward head = m.forward(ctx, p, input_for(m, batch, 5), 0, n / 2);
  for (const auto& [begin, x] :
       {std::pair<int, Tensor>{0, input_for(m, batch, 5)}, std::pair<int, Tensor>{n / 2, head.y}}) {
    for (const bool need_dx : {true, false}) {
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}}) {
        const std::string where = "range [" + std::to_string(begin) + ", " + std::to_string(n) +
                                  ") need_dx " + std::to_string(need_dx) + " alpha " +
                                  std::to_string(alpha);
        Model::RangeForward f1 = m.forward(ctx, p, x, begin, n);
        Model::RangeForward f2 = m.forward(ctx, p, x, begin, n);
        const Tensor dy = random_tensor(f1.y.shape(), 9);
        ParamSet fused = p.clone();  // beta = 1 accumulates onto non-zero values
        ParamSet split = p.clone();
        const Tensor dx1 = m.backward(ctx, p, f1.saved, dy, begin, n, need_dx, fused, alpha, beta);
        const Tensor dx2 = m.backward_input(ctx, p, f2.saved, dy, begin, n, need_dx);
        // B keeps only what W needs: layers without parameters are released already.
        for (int i = begin; i < n; ++i) {
          if (m.layer(i).param_specs().empty()) {
            EXPECT_TRUE(f2.saved[static_cast<std::size_t>(i - begin)].empty()) << where << i;
          }
        }
        m.backward_weight(ctx, f2.saved, begin, n, split, alpha, beta);
        EXPECT_TRUE(all_released(f2.saved)) << where;
        EXPECT_TRUE(same_bits(dx1, dx2)) << where;
        EXPECT_EQ(dx2.defined(), need_dx && m.layer(begin).input_dtype() == DType::f32) << where;
        expect_same_bits(fused, split, where);
      }
    }
  }
}

// (c) Re-materialization: a forward with keep_saved = false keeps nothing and gives the same
// output; the recomputing forward (keep_saved = true, same seed and sample_begin) then backward
// equals the normal path, dropout included.
TEST_P(StageSplit, RematerializedForwardEqualsKeptForward) {
  const Model m = Model::build(GetParam());
  const int n = m.num_layers();
  const ParamSet p = m.init_params(3);
  const std::int64_t batch = 3;
  const Context ctx = train_ctx(2);  // a slice that does not start the minibatch
  const int begin = 1;
  const Tensor x = m.forward(ctx, p, input_for(m, batch, 5), 0, begin).y;
  Model::RangeForward kept = m.forward(ctx, p, x, begin, n);
  const Tensor dy = random_tensor(kept.y.shape(), 9);
  ParamSet want = p.zeros_like();
  const Tensor want_dx = m.backward(ctx, p, kept.saved, dy, begin, n, true, want);

  Context lean = ctx;
  lean.keep_saved = false;
  const Model::RangeForward first = m.forward(lean, p, x, begin, n);
  EXPECT_TRUE(same_bits(first.y, m.forward(ctx, p, x, begin, n).y));
  ASSERT_EQ(first.saved.size(), static_cast<std::size_t>(n - begin));
  for (const Saved& s : first.saved) EXPECT_TRUE(s.empty());
  // Backward straight from the lean forward is an error, not garbage.
  std::vector<Saved> nothing = first.saved;
  ParamSet unused = p.zeros_like();
  EXPECT_THROW(m.backward(ctx, p, nothing, dy, begin, n, true, unused), std::invalid_argument);
  nothing = first.saved;
  EXPECT_THROW(m.backward_input(ctx, p, nothing, dy, begin, n, false), std::invalid_argument);

  Model::RangeForward again = m.forward(ctx, p, x, begin, n);
  ParamSet got = p.zeros_like();
  const Tensor got_dx = m.backward(ctx, p, again.saved, dy, begin, n, true, got);
  EXPECT_TRUE(same_bits(want_dx, got_dx));
  expect_same_bits(want, got, "recomputed");

  // Recomputing with another sample_begin gives other dropout masks: the check can fail.
  if (m.spec().dropout > 0) {
    Context shifted = ctx;
    shifted.sample_begin = 0;
    Model::RangeForward wrong = m.forward(shifted, p, x, begin, n);
    ParamSet bad = p.zeros_like();
    m.backward(ctx, p, wrong.saved, dy, begin, n, true, bad);
    EXPECT_GT(rel_error(want, bad), 1e-3);
  }
}

// The gradients and input rows of slices [lo, hi) run through backward on `states` (one saved
// state per slice), with fused or split backward.
struct SlicedBackward {
  ParamSet grads;
  Tensor dx;  // the slices' input gradients joined; undefined when there are none
};

SlicedBackward backward_slices(const Model& m, const ParamSet& p,
                               std::vector<std::vector<Saved>> states,
                               const std::vector<std::int64_t>& cuts, const Tensor& dy, int begin,
                               bool split) {
  SlicedBackward out{p.zeros_like(), {}};
  std::vector<Tensor> rows;
  for (std::size_t j = 0; j < states.size(); ++j) {
    const Context ctx = train_ctx(cuts[j]);
    const Tensor dyj = dy.slice(cuts[j], cuts[j + 1]);
    Tensor dx;
    if (split) {
      dx = m.backward_input(ctx, p, states[j], dyj, begin, m.num_layers(), true);
      m.backward_weight(ctx, states[j], begin, m.num_layers(), out.grads, 1.0f, 1.0f);
    } else {
      dx = m.backward(ctx, p, states[j], dyj, begin, m.num_layers(), true, out.grads, 1.0f, 1.0f);
    }
    if (dx.defined()) rows.push_back(dx);
  }
  if (!rows.empty()) out.dx = concat_rows(rows);
  return out;
}

// (d) UMPIPE re-slicing on one stage: forward over slices of 1 and 3 samples, their saved
// states joined and cut into backward slices of 3 and 1; the summed gradients and the input
// gradient rows equal the whole-batch backward. Also: a whole-batch forward cut into slices,
// and the state after B cut for separate W's.
TEST_P(StageSplit, UmpipeReslicingMatchesTheWholeBatch) {
  const Model m = Model::build(GetParam());
  const int n = m.num_layers();
  const ParamSet p = m.init_params(3);
  const std::int64_t batch = 4;
  const Tensor input = input_for(m, batch, 5);
  for (const int begin : {0, 1}) {
    const std::string where = "stage [" + std::to_string(begin) + ", " + std::to_string(n) + ")";
    const Tensor x = m.forward(train_ctx(), p, input, 0, begin).y;
    Model::RangeForward whole = m.forward(train_ctx(), p, x, begin, n);
    const Tensor dy = random_tensor(whole.y.shape(), 9);
    ParamSet want = p.zeros_like();
    const Tensor want_dx = m.backward(train_ctx(), p, whole.saved, dy, begin, n, true, want);

    // Forward slices (1, 3).
    const std::vector<std::int64_t> fcuts{0, 1, 4};
    std::vector<std::vector<Saved>> parts;
    std::vector<std::int64_t> sizes;
    for (std::size_t j = 0; j + 1 < fcuts.size(); ++j) {
      Model::RangeForward f =
          m.forward(train_ctx(fcuts[j]), p, x.slice(fcuts[j], fcuts[j + 1]), begin, n);
      parts.push_back(std::move(f.saved));
      sizes.push_back(fcuts[j + 1] - fcuts[j]);
    }
    const std::vector<Saved> joined = m.concat_saved(parts, sizes, begin, n);
    // Backward slices (3, 1).
    const std::vector<std::int64_t> bcuts{0, 3, 4};
    auto reslice = [&](const std::vector<Saved>& state) {
      std::vector<std::vector<Saved>> out;
      for (std::size_t j = 0; j + 1 < bcuts.size(); ++j) {
        out.push_back(m.slice_saved(state, begin, n, batch, bcuts[j], bcuts[j + 1]));
      }
      return out;
    };
    for (const bool split : {false, true}) {
      const SlicedBackward got = backward_slices(m, p, reslice(joined), bcuts, dy, begin, split);
      EXPECT_LE(rel_error(want, got.grads), 1e-5) << where << " split " << split;
      EXPECT_LE(rel_error(want_dx, got.dx), 1e-5) << where << " split " << split;
    }

    // A whole-batch forward cut into the backward slices (views, no copy).
    Model::RangeForward again = m.forward(train_ctx(), p, x, begin, n);
    const SlicedBackward cut = backward_slices(m, p, reslice(again.saved), bcuts, dy, begin, false);
    EXPECT_LE(rel_error(want, cut.grads), 1e-5) << where;
    EXPECT_LE(rel_error(want_dx, cut.dx), 1e-5) << where;

    // The state after B (output gradients, composite layers' intermediates) cut for two W's.
    Model::RangeForward b = m.forward(train_ctx(), p, x, begin, n);
    const Tensor bdx = m.backward_input(train_ctx(), p, b.saved, dy, begin, n, true);
    EXPECT_TRUE(same_bits(bdx, want_dx)) << where;
    ParamSet w = p.zeros_like();
    for (std::vector<Saved> s : reslice(b.saved)) {
      m.backward_weight(train_ctx(), s, begin, n, w, 1.0f, 1.0f);
    }
    EXPECT_LE(rel_error(want, w), 1e-5) << where;

    // The checks can fail: a perturbed saved activation of the last layer, and slices joined
    // in the wrong order (other dropout masks: refused; else the dx rows move).
    std::vector<Saved> bad = m.concat_saved(parts, sizes, begin, n);
    Tensor& last_x = bad.back().front();
    last_x = last_x.clone();
    last_x.data<float>()[0] += 0.5f;
    const SlicedBackward wrong = backward_slices(m, p, reslice(bad), bcuts, dy, begin, false);
    EXPECT_GT(rel_error(want, wrong.grads), 1e-3) << where;

    const std::vector<std::vector<Saved>> swapped{parts[1], parts[0]};
    const std::vector<std::int64_t> swapped_sizes{3, 1};
    if (m.spec().dropout > 0) {
      EXPECT_THROW(m.concat_saved(swapped, swapped_sizes, begin, n), std::invalid_argument)
          << where;
    } else {
      const std::vector<Saved> mixed = m.concat_saved(swapped, swapped_sizes, begin, n);
      const SlicedBackward moved = backward_slices(m, p, reslice(mixed), bcuts, dy, begin, false);
      EXPECT_GT(rel_error(want_dx, moved.dx), 1e-3) << where;
    }
  }
}

TEST_P(StageSplit, BadSlicesAreRefused) {
  const Model m = Model::build(GetParam());
  const int n = m.num_layers();
  const ParamSet p = m.init_params(3);
  Model::RangeForward f1 = m.forward(train_ctx(), p, input_for(m, 1, 5), 0, n);
  Model::RangeForward f3 = m.forward(train_ctx(1), p, input_for(m, 3, 6), 0, n);
  EXPECT_THROW(m.slice_saved(f3.saved, 0, n, 3, 2, 2), std::invalid_argument);      // empty
  EXPECT_THROW(m.slice_saved(f3.saved, 0, n, 3, 1, 4), std::invalid_argument);      // past the end
  EXPECT_THROW(m.slice_saved(f3.saved, 0, n, 2, 0, 1), std::invalid_argument);      // wrong batch
  EXPECT_THROW(m.slice_saved(f3.saved, 0, n - 1, 3, 0, 1), std::invalid_argument);  // range
  const std::vector<std::vector<Saved>> parts{f1.saved, f3.saved};
  const std::vector<std::int64_t> wrong{2, 2};
  EXPECT_THROW(m.concat_saved(parts, wrong, 0, n), std::invalid_argument);
  const std::vector<std::int64_t> short_list{1};
  EXPECT_THROW(m.concat_saved(parts, short_list, 0, n), std::invalid_argument);
  try {
    m.slice_saved(f3.saved, 0, n, 2, 0, 1);
  } catch (const std::invalid_argument& e) {
    // Names the op, the layer and the tensor.
    EXPECT_NE(std::string(e.what()).find("Model::slice_saved layer 0"), std::string::npos)
        << e.what();
  }
}

SimCosts distinct_costs(int n) {
  SimCosts c;
  for (int i = 0; i < n; ++i) {
    c.forward_ms.push_back(1.0 + i);
    c.backward_input_ms.push_back(10.0 * (i + 1));
    c.backward_weight_ms.push_back(100.0 * (i + 1));
  }
  return c;
}

// (e) The same on sim tensors: shapes follow the CPU's, split B/W charges what the fused
// backward charges (B the input-gradient durations, W the weight-gradient ones), and UMPIPE
// re-slicing works on shapes.
TEST_P(StageSplit, SimTensorsSplitAndChargeTheSame) {
  const Model m = Model::build(GetParam());
  const int n = m.num_layers();
  const std::int64_t batch = 4;
  const int begin = 1;
  const ParamSet cpu_p = m.init_params(3);
  const ParamSet sim_p = m.init_params(3, Device::sim());
  const Tensor cpu_in = input_for(m, batch, 5);
  const Tensor cpu_x = m.forward(train_ctx(), cpu_p, cpu_in, 0, begin).y;
  const Tensor sim_x = Tensor::empty(cpu_x.shape(), cpu_x.dtype(), Device::sim());
  const SimCosts costs = distinct_costs(n);
  double fwd = 0, bin = 0, bw = 0;
  for (int i = begin; i < n; ++i) {
    fwd += costs.forward_ms[static_cast<std::size_t>(i)];
    bin += costs.backward_input_ms[static_cast<std::size_t>(i)];
    bw += costs.backward_weight_ms[static_cast<std::size_t>(i)];
  }

  SimClock fused_clock(costs), split_clock(costs);
  Context fused_ctx = train_ctx(), split_ctx = train_ctx();
  fused_ctx.sim_clock = &fused_clock;
  split_ctx.sim_clock = &split_clock;
  Model::RangeForward f1 = m.forward(fused_ctx, sim_p, sim_x, begin, n);
  Model::RangeForward f2 = m.forward(split_ctx, sim_p, sim_x, begin, n);
  EXPECT_EQ(f1.y.shape(), m.activation_shapes(batch).back());
  const Tensor dy = Tensor::empty(f1.y.shape(), DType::f32, Device::sim());
  ParamSet g1 = sim_p.zeros_like(), g2 = sim_p.zeros_like();
  const Tensor dx1 = m.backward(fused_ctx, sim_p, f1.saved, dy, begin, n, true, g1);
  const double before_b = split_clock.elapsed_ms();
  const Tensor dx2 = m.backward_input(split_ctx, sim_p, f2.saved, dy, begin, n, true);
  EXPECT_NEAR(split_clock.elapsed_ms() - before_b, bin, 1e-9);
  m.backward_weight(split_ctx, f2.saved, begin, n, g2);
  EXPECT_NEAR(split_clock.elapsed_ms() - before_b, bin + bw, 1e-9);
  EXPECT_NEAR(fused_clock.elapsed_ms(), split_clock.elapsed_ms(), 1e-9);
  EXPECT_NEAR(fused_clock.elapsed_ms(), fwd + bin + bw, 1e-9);
  EXPECT_EQ(fused_clock.ops(), split_clock.ops());
  EXPECT_TRUE(all_released(f2.saved));
  ASSERT_TRUE(dx1.defined() && dx2.defined());
  EXPECT_EQ(dx1.shape(), cpu_x.shape());
  EXPECT_EQ(dx2.shape(), cpu_x.shape());
  EXPECT_TRUE(dx2.device().is_sim());

  // Re-materialization on sim: nothing kept, the same forward charged.
  SimClock lean_clock(costs);
  Context lean = train_ctx();
  lean.sim_clock = &lean_clock;
  lean.keep_saved = false;
  const Model::RangeForward nothing = m.forward(lean, sim_p, sim_x, begin, n);
  for (const Saved& s : nothing.saved) EXPECT_TRUE(s.empty());
  EXPECT_NEAR(lean_clock.elapsed_ms(), fwd, 1e-9);

  // UMPIPE re-slicing on shapes: forward (1, 3), backward (3, 1).
  SimClock clock(costs);
  Context ctx = train_ctx();
  ctx.sim_clock = &clock;
  std::vector<std::vector<Saved>> parts;
  const std::vector<std::int64_t> sizes{1, 3};
  parts.push_back(m.forward(ctx, sim_p, sim_x.slice(0, 1), begin, n).saved);
  parts.push_back(m.forward(ctx, sim_p, sim_x.slice(1, 4), begin, n).saved);
  const std::vector<Saved> joined = m.concat_saved(parts, sizes, begin, n);
  const std::vector<Shape> in_shapes = [&] {
    std::vector<Shape> s{cpu_x.shape()};
    const std::vector<Shape> acts = m.activation_shapes(batch);
    for (int i = begin; i + 1 < n; ++i) s.push_back(acts[static_cast<std::size_t>(i)]);
    return s;
  }();
  for (int i = begin; i < n; ++i) {
    const Saved& s = joined[static_cast<std::size_t>(i - begin)];
    ASSERT_EQ(s.size(), 1u) << "layer " << i;
    EXPECT_EQ(s[0].shape(), in_shapes[static_cast<std::size_t>(i - begin)]) << "layer " << i;
    EXPECT_TRUE(s[0].device().is_sim());
  }
  ParamSet g = sim_p.zeros_like();
  const std::vector<std::int64_t> bcuts{0, 3, 4};
  clock.reset();
  for (std::size_t j = 0; j + 1 < bcuts.size(); ++j) {
    std::vector<Saved> s = m.slice_saved(joined, begin, n, batch, bcuts[j], bcuts[j + 1]);
    Shape want_dx = cpu_x.shape();
    want_dx[0] = bcuts[j + 1] - bcuts[j];
    EXPECT_EQ(s.front().front().shape(), want_dx);
    const Tensor dyj = dy.slice(bcuts[j], bcuts[j + 1]);
    const Tensor dxj = m.backward_input(ctx, sim_p, s, dyj, begin, n, true);
    ASSERT_TRUE(dxj.defined());
    EXPECT_EQ(dxj.shape(), want_dx);
    m.backward_weight(ctx, s, begin, n, g, 1.0f, 1.0f);
  }
  EXPECT_NEAR(clock.elapsed_ms(), 2 * (bin + bw), 1e-9);
  // A wrong batch is refused on sim too.
  EXPECT_THROW(m.slice_saved(joined, begin, n, 3, 0, 1), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Models, StageSplit,
                         ::testing::Values(mlp_spec({12, 10, 8, 5}), tiny_gpt(), small_vgg()),
                         [](const auto& test_info) { return test_info.param.name; });

// Every layer honours keep_saved = false (nothing kept, same output) and training = false
// alone (dropout off, but what backward needs still kept).
TEST(KeepSaved, EveryLayerKeepsNothingWhenAskedAndTheSameOutput) {
  const Tensor ids = Tensor::from_vector(std::vector<std::int32_t>{1, 3, 3, 0, 6, 1}, {2, 3});
  const std::vector<std::pair<std::shared_ptr<Layer>, Tensor>> cases{
      {std::make_shared<Linear>(6, 5), random_tensor({4, 6}, 1)},
      {std::make_shared<Linear>(6, 5, cpu::Activation::relu), random_tensor({4, 6}, 2)},
      {std::make_shared<Linear>(6, 5, cpu::Activation::gelu), random_tensor({2, 2, 6}, 3)},
      {std::make_shared<ReLU>(), random_tensor({3, 4}, 4)},
      {std::make_shared<GELU>(), random_tensor({3, 4}, 5)},
      {std::make_shared<LayerNorm>(6), random_tensor({3, 6}, 6)},
      {std::make_shared<Embedding>(7, 4, 3), ids},
      {std::make_shared<CausalSelfAttention>(8, 2), random_tensor({2, 5, 8}, 7)},
      {std::make_shared<TransformerBlock>(8, 2, 16, 0.2f, 1, 2), random_tensor({2, 4, 8}, 8)},
      {std::make_shared<Dropout>(0.5f, 3), random_tensor({4, 5}, 9)},
      {std::make_shared<Conv2d>(2, 3, 3, 1, 1, cpu::Activation::relu),
       random_tensor({2, 2, 5, 5}, 10)},
      {std::make_shared<MaxPool2d>(2), random_tensor({2, 2, 4, 4}, 11)},
      {std::make_shared<Flatten>(), random_tensor({2, 2, 3}, 12)},
  };
  for (const auto& [layer, x] : cases) {
    const std::vector<Tensor> params = testing::random_params(*layer, 13);
    Context keep{true, 5, 1};
    Context lean = keep;
    lean.keep_saved = false;
    const ForwardResult a = layer->forward(keep, params, x);
    const ForwardResult b = layer->forward(lean, params, x);
    EXPECT_FALSE(a.saved.empty()) << layer->describe();
    EXPECT_TRUE(b.saved.empty()) << layer->describe();
    EXPECT_TRUE(same_bits(a.y, b.y)) << layer->describe();
    // Evaluation mode still keeps state when asked (a backward in eval mode is possible).
    Context eval{false, 5, 1};
    ForwardResult e = layer->forward(eval, params, x);
    const Tensor dy = random_tensor(e.y.shape(), 14);
    EXPECT_NO_THROW(layer->backward(eval, params, e.saved, dy, true)) << layer->describe();
  }
}

}  // namespace
}  // namespace tandem::models
