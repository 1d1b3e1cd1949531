// The sim device: layers run on shapes only and charge configured durations to a SimClock.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grad_check.hpp"
#include "models/executor.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/sim_clock.hpp"

namespace tandem::models {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Distinct durations per layer and op (exact in binary), so a charge to the wrong entry shows.
SimCosts distinct_costs(int n) {
  SimCosts c;
  for (int i = 0; i < n; ++i) {
    c.forward_ms.push_back(1.0 + i);
    c.backward_input_ms.push_back(0.5 + 2.0 * i);
    c.backward_weight_ms.push_back(0.25 * (i + 1));
  }
  c.optimizer_step_ms = 3.5;
  return c;
}

Tensor cpu_input(const Model& m, std::int64_t batch) {
  if (m.input_dtype() == DType::i32) {
    Tensor t = Tensor::empty(m.input_shape(batch), DType::i32);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      t.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % m.spec().vocab);
    }
    return t;
  }
  return testing::random_tensor(m.input_shape(batch), 3);
}

void expect_sim_without_data(const Tensor& t, const std::string& what) {
  EXPECT_TRUE(t.device().is_sim()) << what << ": " << t.describe();
  EXPECT_EQ(t.allocated_bytes(), 0u) << what << ": " << t.describe();
}

ModelSpec tiny_gpt() {
  ModelSpec s = gpt_spec(2, 16, 2, 6, 11);
  s.dropout = 0.1f;
  return s;
}

ModelSpec tiny_vgg() {
  ModelSpec s = vgg16_small_spec(7);
  s.width_mult = 1.0 / 16;
  return s;
}

class SimModel : public ::testing::TestWithParam<ModelSpec> {};

// Layer by layer, forward then backward, on the CPU and on sim: same shapes and dtypes of every
// output, input gradient and weight gradient; nothing on sim holds memory; the clock gets
// exactly the configured durations of the ops that ran.
TEST_P(SimModel, MatchesCpuShapesWithoutDataAndChargesTheTable) {
  const Model m = Model::build(GetParam());
  const int n = m.num_layers();
  const std::int64_t batch = 2;
  SimClock clock(distinct_costs(n));
  Context cpu_ctx;
  cpu_ctx.seed = 5;
  Context sim_ctx = cpu_ctx;
  sim_ctx.sim_clock = &clock;

  const ParamSet cpu_params = m.init_params(1);
  const ParamSet sim_params = m.init_params(1, Device::sim());
  ASSERT_EQ(sim_params.names(), cpu_params.names());
  for (std::int64_t i = 0; i < sim_params.size(); ++i) {
    EXPECT_EQ(sim_params[i].shape(), cpu_params[i].shape());
    EXPECT_GT(cpu_params[i].allocated_bytes(), 0u);
    expect_sim_without_data(sim_params[i], sim_params.name(i));
  }

  Tensor cpu_x = cpu_input(m, batch);
  Tensor sim_x = Tensor::empty(cpu_x.shape(), cpu_x.dtype(), Device::sim());
  std::vector<std::vector<Saved>> cpu_saved, sim_saved;
  for (int i = 0; i < n; ++i) {
    Model::RangeForward c = m.forward(cpu_ctx, cpu_params, cpu_x, i, i + 1);
    Model::RangeForward s = m.forward(sim_ctx, sim_params, sim_x, i, i + 1);
    const std::string where = "forward of layer " + std::to_string(i);
    EXPECT_EQ(s.y.shape(), c.y.shape()) << where;
    EXPECT_EQ(s.y.dtype(), c.y.dtype()) << where;
    expect_sim_without_data(s.y, where);
    for (const Tensor& t : s.saved.at(0)) expect_sim_without_data(t, where + " saved");
    cpu_x = c.y;
    sim_x = s.y;
    cpu_saved.push_back(std::move(c.saved));
    sim_saved.push_back(std::move(s.saved));
  }
  EXPECT_EQ(sim_x.shape(), m.activation_shapes(batch).back());

  ParamSet cpu_grads = cpu_params.zeros_like();
  ParamSet sim_grads = sim_params.zeros_like();
  Tensor cpu_dy = Tensor::full(cpu_x.shape(), 0.01f);
  Tensor sim_dy = Tensor::empty(cpu_x.shape(), DType::f32, Device::sim());
  double expected = 0;
  for (int i = 0; i < n; ++i) expected += clock.costs().forward_ms[static_cast<std::size_t>(i)];
  for (int i = n - 1; i >= 0; --i) {
    const bool need_dx = i > 0;
    const std::string where = "backward of layer " + std::to_string(i);
    cpu_dy = m.backward(cpu_ctx, cpu_params, cpu_saved[static_cast<std::size_t>(i)], cpu_dy, i,
                        i + 1, need_dx, cpu_grads);
    sim_dy = m.backward(sim_ctx, sim_params, sim_saved[static_cast<std::size_t>(i)], sim_dy, i,
                        i + 1, need_dx, sim_grads);
    ASSERT_EQ(sim_dy.defined(), cpu_dy.defined()) << where;
    if (sim_dy.defined()) {
      EXPECT_EQ(sim_dy.shape(), cpu_dy.shape()) << where;
      EXPECT_EQ(sim_dy.dtype(), cpu_dy.dtype()) << where;
      expect_sim_without_data(sim_dy, where);
      expected += clock.costs().backward_input_ms[static_cast<std::size_t>(i)];
    }
    expected += clock.costs().backward_weight_ms[static_cast<std::size_t>(i)];
  }
  for (std::int64_t i = 0; i < sim_grads.size(); ++i) {
    EXPECT_EQ(sim_grads[i].shape(), cpu_grads[i].shape());
    expect_sim_without_data(sim_grads[i], sim_grads.name(i));
  }
  EXPECT_EQ(clock.ops(), n + (n - 1) + n);  // F per layer, B above layer 0, W per layer
  EXPECT_DOUBLE_EQ(clock.elapsed_ms(), expected);

  // The whole range at once charges the same, and returns the same shapes.
  clock.reset();
  const Tensor x0 = Tensor::empty(m.input_shape(batch), m.input_dtype(), Device::sim());
  Model::RangeForward all = m.forward(sim_ctx, sim_params, x0, 0, n);
  EXPECT_EQ(all.y.shape(), sim_x.shape());
  const Tensor dx = m.backward(sim_ctx, sim_params, all.saved, all.y, 0, n, false, sim_grads);
  EXPECT_FALSE(dx.defined());
  EXPECT_DOUBLE_EQ(clock.elapsed_ms(), expected);
}

INSTANTIATE_TEST_SUITE_P(Zoo, SimModel, ::testing::Values(tiny_gpt(), tiny_vgg()),
                         [](const auto& p) { return p.param.name; });

TEST(SimDevice, MixingSimAndCpuTensorsNamesTheOpAndDevices) {
  const Model m = Model::build(mlp_spec({6, 5, 3}));
  SimClock clock(SimCosts::uniform(m.num_layers(), 1, 1, 1));
  Context ctx;
  ctx.sim_clock = &clock;
  const ParamSet cpu_params = m.init_params(1);
  const ParamSet sim_params = m.init_params(1, Device::sim());
  const Tensor sim_x = Tensor::empty({2, 6}, DType::f32, Device::sim());

  const std::string fwd = error_of([&] { m.forward(ctx, cpu_params, sim_x, 0, 2); });
  EXPECT_TRUE(contains(fwd, "Model::forward layer 0")) << fwd;
  EXPECT_TRUE(contains(fwd, "f32[2, 6] sim")) << fwd;
  EXPECT_TRUE(contains(fwd, "f32[5, 6] cpu")) << fwd;
  EXPECT_EQ(clock.ops(), 0);

  Model::RangeForward f = m.forward(ctx, sim_params, sim_x, 0, 2);
  ParamSet cpu_grads = cpu_params.zeros_like();
  const std::string bwd =
      error_of([&] { m.backward(ctx, sim_params, f.saved, f.y, 0, 2, true, cpu_grads); });
  EXPECT_TRUE(contains(bwd, "Model::backward layer 1")) << bwd;
  EXPECT_TRUE(contains(bwd, "gradient 'weight'")) << bwd;
  EXPECT_TRUE(contains(bwd, "cpu")) << bwd;
  EXPECT_TRUE(contains(bwd, "sim")) << bwd;

  // A data-less layer on CPU data with sim weights is just as wrong.
  const Tensor cpu_x = Tensor::zeros({2, 6});
  EXPECT_TRUE(contains(error_of([&] { m.forward(ctx, sim_params, cpu_x, 0, 1); }), "mixed"));
}

TEST(SimDevice, NeedsAClockAndACompleteTable) {
  const Model m = Model::build(mlp_spec({6, 5, 3}));
  const ParamSet p = m.init_params(1, Device::sim());
  const Tensor x = Tensor::empty({2, 6}, DType::f32, Device::sim());
  EXPECT_TRUE(contains(error_of([&] { m.forward(Context{}, p, x, 0, 2); }), "sim_clock"));

  SimClock short_table(SimCosts::uniform(1, 1, 1, 1));
  Context ctx;
  ctx.sim_clock = &short_table;
  const std::string msg = error_of([&] { m.forward(ctx, p, x, 0, 2); });
  EXPECT_TRUE(contains(msg, "forward_ms")) << msg;
  EXPECT_TRUE(contains(msg, "layer 1")) << msg;

  SimCosts negative = SimCosts::uniform(2, 1, 1, 1);
  negative.forward_ms[0] = -1;
  SimClock bad(negative);
  ctx.sim_clock = &bad;
  const std::string negative_msg = error_of([&] { m.forward(ctx, p, x, 0, 1); });
  EXPECT_TRUE(contains(negative_msg, "Model::forward layer 0")) << negative_msg;
  EXPECT_TRUE(contains(negative_msg, "-1.0")) << negative_msg;
  EXPECT_EQ(bad.ops(), 0);

  // Shapes are checked as on the CPU, against the layer's parameter specs.
  SimClock ok(SimCosts::uniform(2, 1, 1, 1));
  ctx.sim_clock = &ok;
  const Tensor wrong = Tensor::empty({2, 7}, DType::f32, Device::sim());
  EXPECT_THROW(m.forward(ctx, p, wrong, 0, 1), std::invalid_argument);
  ParamSet reshaped;
  for (std::int64_t i = 0; i < p.size(); ++i) {
    reshaped.add(p.name(i), i == 0 ? Tensor::empty({5, 7}, DType::f32, Device::sim()) : p[i]);
  }
  const std::string shape_msg = error_of([&] { m.forward(ctx, reshaped, x, 0, 1); });
  EXPECT_TRUE(contains(shape_msg, "Model::forward layer 0")) << shape_msg;
  EXPECT_TRUE(contains(shape_msg, "parameter 'weight' must be f32[5, 6]")) << shape_msg;
  EXPECT_EQ(ok.ops(), 0);
}

// Only an executor whose work goes on after run() returns needs its tensors kept by the caller
// (a stage holds them until the completion); cpu work is over and sim work reads nothing.
TEST(SimDevice, OnlyExecutorsWhoseWorkOutlivesRunNeedItsTensorsKept) {
  EXPECT_FALSE(make_executor(Device::sim())->uses_memory_after_return());
  EXPECT_FALSE(make_executor(Device::cpu())->uses_memory_after_return());
  struct Unknown final : Executor {
    Device device() const override { return Device::cpu(); }
    Completion run(Context, const std::function<void(const Context&)>&) override { return {}; }
    LossResult loss(const Context&, const Loss&, const Tensor&, const Tensor&,
                    float) const override {
      return {};
    }
    void step(const Context&, Optimizer&, ParamSet&, const ParamSet&) const override {}
  };
  EXPECT_TRUE(Unknown().uses_memory_after_return());  // what is not known to be safe is held
}

TEST(SimDevice, OptimizersStepSimParametersAsTimedNoOps) {
  const Model m = Model::build(mlp_spec({6, 5, 3}));
  for (const char* kind : {"sgd", "adamw"}) {
    OptimizerSpec spec;
    spec.kind = kind;
    spec.momentum = spec.kind == "sgd" ? 0.9 : 0.0;
    const std::unique_ptr<Optimizer> opt = make_optimizer(spec);
    SimClock clock(distinct_costs(m.num_layers()));
    ParamSet p = m.init_params(1, Device::sim());
    const ParamSet g = p.zeros_like();
    opt->sim_step(p, g, clock);
    opt->sim_step(p, g, clock);
    EXPECT_EQ(opt->steps(), 2) << kind;
    EXPECT_DOUBLE_EQ(clock.elapsed_ms(), 2 * clock.costs().optimizer_step_ms) << kind;
    EXPECT_TRUE(opt->state().empty()) << kind;
    for (std::int64_t i = 0; i < p.size(); ++i) expect_sim_without_data(p[i], p.name(i));

    const std::string data_step = error_of([&] { opt->step(p, g); });
    EXPECT_TRUE(contains(data_step, "sim_step")) << data_step;
    ParamSet cpu = m.init_params(1);
    const std::string mixed = error_of([&] { opt->sim_step(cpu, g, clock); });
    EXPECT_TRUE(contains(mixed, std::string("optimizer ") + kind)) << mixed;
    EXPECT_TRUE(contains(mixed, "cpu")) << mixed;
    EXPECT_EQ(opt->steps(), 2) << kind;
  }
}

}  // namespace
}  // namespace tandem::models
