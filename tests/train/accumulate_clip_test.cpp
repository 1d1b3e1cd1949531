// Gradient accumulation and clipping through a whole job (config, plan, data, progress): a step
// of k minibatches equals one device's step on a minibatch k times larger, whatever k and the
// slices, in weights, in the losses reported and in the gradient norms printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "models/kernels/cpu/bf16_gemm.hpp"
#include "train/config.hpp"
#include "train/config_error.hpp"
#include "train/job_error.hpp"
#include "train/session.hpp"

namespace tandem::train {
namespace {

std::string job(std::int64_t minibatch, std::int64_t accumulate, const std::string& pipeline,
                const std::string& extra = "  clip_grad_norm: 0.2\n") {
  return "model: {name: mlp, widths: [8, 24, 24, 24, 3]}\n"
         "data: {kind: teacher, samples: 512, seed: 2, hidden: 8}\n"
         "train:\n"
         "  minibatch: " +
         std::to_string(minibatch) +
         "\n"
         "  accumulate: " +
         std::to_string(accumulate) +
         "\n"
         "  steps: 4\n"
         "  optimizer: {kind: sgd, lr: 0.1, momentum: 0.9}\n"
         "  seed: 5\n"
         "  log_every: 1\n" +
         extra + pipeline;
}

struct Outcome {
  models::ParamSet params;
  std::vector<float> losses;
  std::vector<double> norms;  // one per step (log_every 1)
};

Outcome run(const std::string& yaml) {
  Session session(parse_config(yaml, "test.yaml"));
  Outcome out;
  const TrainSummary s = session.run(
      [&out](const StepRecord& r) { out.norms.push_back(r.grad_norm.value_or(std::nan(""))); });
  out.params = session.params();
  out.losses = s.losses;
  return out;
}

double max_relative_error(const models::ParamSet& a, const models::ParamSet& b) {
  double worst = 0;
  for (std::int64_t i = 0; i < b.size(); ++i) {
    const auto x = a.at(b.name(i)).to_float_vector();
    const auto y = b[i].to_float_vector();
    double diff = 0, scale = 1e-3;
    for (std::size_t k = 0; k < y.size(); ++k) {
      diff = std::max(diff, static_cast<double>(std::fabs(x[k] - y[k])));
      scale = std::max(scale, static_cast<double>(std::fabs(y[k])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

std::string printed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

std::string pipeline(const char* schedule, int slices) {
  return std::string("pipeline:\n  schedule: ") + schedule +
         "\n  slices: " + std::to_string(slices) +
         "\n  stages:\n    - {layers: 0}\n    - {layers: 1}\n    - {layers: 2}\n"
         "    - {layers: 3}\n";
}

TEST(Accumulation, EveryKAndSlicesEqualOneDeviceOnAKTimesMinibatch) {
  for (const std::int64_t k : {1, 2, 4}) {
    const Outcome want = run(job(8 * k, 1, ""));
    // The clip acts: the reported norms exceed it.
    for (const double n : want.norms) EXPECT_GT(n, 0.2) << "k " << k;
    for (const int slices : {1, 4, 7}) {
      for (const char* schedule : {"1f1b", "gpipe"}) {
        SCOPED_TRACE("k " + std::to_string(k) + ", " + std::to_string(slices) + " slices, " +
                     schedule);
        const Outcome got = run(job(8, k, pipeline(schedule, slices)));
        EXPECT_LE(max_relative_error(got.params, want.params), 1e-6);
        ASSERT_EQ(got.losses.size(), want.losses.size());
        ASSERT_EQ(got.norms.size(), want.norms.size());
        for (std::size_t i = 0; i < want.losses.size(); ++i) {
          EXPECT_NEAR(got.losses[i], want.losses[i], 1e-6 * std::fabs(want.losses[i]))
              << "step " << i;
          EXPECT_EQ(printed(got.norms[i]), printed(want.norms[i])) << "step " << i;
          EXPECT_NEAR(got.norms[i], want.norms[i], 1e-6 * want.norms[i]) << "step " << i;
        }
      }
    }
  }
}

TEST(Accumulation, OneDeviceAccumulatesToo) {
  // Without a pipeline section: one stage of k slices.
  const Outcome want = run(job(24, 1, ""));
  const Outcome got = run(job(8, 3, ""));
  EXPECT_LE(max_relative_error(got.params, want.params), 1e-6);
}

TEST(Accumulation, TwoBwAccumulatesOverItsBatch) {
  // 2BW's batch of m slices is its update: k minibatches make one batch of k * m slices.
  const std::string two_bw =
      "pipeline:\n  schedule: 2bw\n  slices: 4\n  stages:\n"
      "    - {layers: 0-1}\n    - {layers: 2-3}\n";
  const Outcome a = run(job(8, 2, two_bw));
  std::string same = two_bw;
  same.replace(same.find("slices: 4"), 9, "slices: 8");
  const Outcome b = run(job(16, 1, same));
  EXPECT_LE(max_relative_error(a.params, b.params), 1e-6);
}

TEST(Accumulation, HostileValuesAreRefusedAtTheirKey) {
  const auto refused = [](const std::string& yaml, const std::string& key) {
    try {
      (void)parse_config(yaml, "test.yaml");
      ADD_FAILURE() << "accepted: " << yaml;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("test.yaml:"), std::string::npos) << e.what();
    }
  };
  refused(job(8, 0, ""), "accumulate");
  refused(job(8, -3, ""), "accumulate");
  refused(job(8, 1000000, ""), "accumulate");
  refused(job(8, 100, ""), "accumulate");  // 800 samples per step, 512 in the data
  refused(job(8, 2, pipeline("pipedream", 1)), "train.accumulate");
  refused(job(8, 2, pipeline("pipedream-vsync", 1)), "train.accumulate");
  for (const char* clip : {"0", "-1", ".nan", ".inf", "x", "[1]"}) {
    refused(job(8, 1, "", std::string("  clip_grad_norm: ") + clip + "\n"), "clip_grad_norm");
  }
  refused(job(8, 1, "", "  clip_grad_norm: 1\n  clip_grad_norm: 2\n"), "clip_grad_norm");
}

TEST(Clipping, AsynchronousStagesReportTheirNormsTogether) {
  const Outcome got = run(job(8, 1, pipeline("pipedream", 1)));
  ASSERT_EQ(got.norms.size(), 4u);
  for (const double n : got.norms) EXPECT_TRUE(std::isfinite(n) && n > 0) << n;
}

}  // namespace
}  // namespace tandem::train

namespace tandem::train {
namespace {

// train.precision: bf16 rounds the products' operands (Linear layers on cpu stages, where the
// CPU has bf16 instructions), so a bf16 run differs from the f32 one by bf16-sized amounts.
TEST(Precision, Bf16TrainsCloseToF32AndBadValuesAreRefused) {
  const std::string f32 = job(16, 1, pipeline("1f1b", 2), "");
  const std::string bf16 = job(16, 1, pipeline("1f1b", 2), "  precision: bf16\n");
  const Outcome a = run(f32);
  const Outcome b = run(bf16);
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_NEAR(b.losses[i], a.losses[i], 0.02 * std::fabs(a.losses[i])) << "step " << i;
  }
  EXPECT_EQ(parse_config(bf16, "t.yaml").train.precision, models::MatmulPrecision::bf16);
  for (const char* bad : {"fp16", "tf32", "BF16", "[bf16]"}) {
    try {
      (void)parse_config(job(16, 1, "", std::string("  precision: ") + bad + "\n"), "t.yaml");
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("train.precision"), std::string::npos) << e.what();
    }
  }
  // Given twice, differently, it is refused where it supersedes.
  std::string both = bf16;
  both.replace(both.find("  schedule: 1f1b"), 16, "  schedule: 1f1b\n  precision: tf32");
  EXPECT_THROW((void)parse_config(both, "t.yaml"), ConfigError);
}

// A bf16 pipeline rounds nothing one device does not: the Linear layers round what they read
// (activations in forward, gradients in backward) to bf16 anyway, so sending both in bf16
// between stages (pipeline.wire_dtype, bf16 by default at bf16 precision) changes no value, and
// a 4-stage run equals one device's bf16 run in weights, losses and norms.
TEST(Precision, AFourStageBf16RunEqualsOneDeviceInBf16WhateverTheWire) {
  if (!models::cpu::bf16_gemm_native()) GTEST_SKIP() << "no AVX512-BF16 or AMX: f32 products";
  const std::string bf16 = "  precision: bf16\n  clip_grad_norm: 0.2\n";
  const Outcome want = run(job(16, 1, "", bf16));
  for (const char* wire : {"", "  wire_dtype: bf16\n", "  wire_dtype: f32\n"}) {
    for (const char* schedule : {"1f1b", "gpipe"}) {
      SCOPED_TRACE(std::string(schedule) + " wire '" + wire + "'");
      std::string p = pipeline(schedule, 4);
      p.insert(p.find("  stages:"), wire);
      const Config c = parse_config(job(16, 1, p, bf16), "t.yaml");
      EXPECT_EQ(wire_dtype(c),
                std::string(wire).find("f32") != std::string::npos ? DType::f32 : DType::bf16);
      const Outcome got = run(job(16, 1, p, bf16));
      EXPECT_LE(max_relative_error(got.params, want.params), 1e-6);
      ASSERT_EQ(got.losses.size(), want.losses.size());
      for (std::size_t i = 0; i < want.losses.size(); ++i) {
        EXPECT_NEAR(got.losses[i], want.losses[i], 1e-6 * std::fabs(want.losses[i])) << i;
        EXPECT_EQ(printed(got.norms[i]), printed(want.norms[i])) << "step " << i;
      }
    }
  }
}

TEST(Precision, TheWireDtypeIsF32OrBf16AndFollowsThePrecision) {
  const std::string p = pipeline("1f1b", 2);
  EXPECT_EQ(wire_dtype(parse_config(job(16, 1, p, ""), "t.yaml")), DType::f32);
  EXPECT_EQ(wire_dtype(parse_config(job(16, 1, p, "  precision: bf16\n"), "t.yaml")), DType::bf16);
  std::string at_f32 = p;
  at_f32.insert(at_f32.find("  stages:"), "  wire_dtype: bf16\n");
  EXPECT_EQ(wire_dtype(parse_config(job(16, 1, at_f32, ""), "t.yaml")), DType::bf16);
  for (const char* bad : {"i32", "fp16", "BF16", "[bf16]", "{a: 1}", "''"}) {
    std::string y = p;
    y.insert(y.find("  stages:"), std::string("  wire_dtype: ") + bad + "\n");
    try {
      (void)parse_config(job(16, 1, y, ""), "t.yaml");
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("pipeline.wire_dtype"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem::train
