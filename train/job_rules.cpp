#include "train/job_rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>

#include "train/job_error.hpp"
#include "transport/wire_message.hpp"

namespace tandem::train {
namespace {

constexpr std::array<std::string_view, 4> kTransports = {"auto", "tcp", "ucx", "cuda-ipc"};
constexpr std::array<std::string_view, 3> kCollectives = {"auto", "gloo", "nccl"};

[[noreturn]] void fail(const std::string& key, const std::string& what) {
  throw JobError(key, what);
}

// `v` in [lo, hi] (or [lo, hi) when hi_open), else a JobError at `key`.
void in_range(const std::string& key, double v, double lo, double hi, bool hi_open) {
  if (std::isfinite(v) && v >= lo && v <= hi && !(hi_open && v == hi)) return;
  fail(key, fmt::format("must be in [{}, {}{}, got {}", lo, hi, hi_open ? ")" : "]", v));
}

template <std::size_t N>
void one_of(const std::string& key, const std::string& value,
            const std::array<std::string_view, N>& names, const char* what) {
  if (std::find(names.begin(), names.end(), value) != names.end()) return;
  fail(key, fmt::format("unknown {} '{}' (expected {})", what, value, fmt::join(names, ", ")));
}

}  // namespace

void check_optimizer(const models::OptimizerSpec& o) {
  const std::string at = "train.optimizer.";
  if (o.kind != "sgd" && o.kind != "adamw") {
    fail(at + "kind", fmt::format("unknown optimizer '{}' (expected sgd or adamw)", o.kind));
  }
  if (!(o.lr > 0) || !std::isfinite(o.lr))
    fail(at + "lr", fmt::format("must be > 0, got {}", o.lr));
  in_range(at + "weight_decay", o.weight_decay, 0.0, 1e6, true);
  if (o.kind == "sgd") {
    in_range(at + "momentum", o.momentum, 0.0, 1.0, true);
    if (o.nesterov && o.momentum == 0) fail(at + "nesterov", "needs momentum > 0");
    return;
  }
  if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1)) {
    fail(at + "betas", fmt::format("values must be in [0, 1), got [{}, {}]", o.beta1, o.beta2));
  }
  if (!(o.eps > 0) || !std::isfinite(o.eps)) fail(at + "eps", "must be > 0");
}

void check_lr_schedule(const LrSchedule& l) {
  const std::string at = "train.lr_schedule.";
  if (l.kind != "constant" && l.kind != "cosine" && l.kind != "linear") {
    fail(at + "kind",
         fmt::format("unknown schedule '{}' (expected constant, cosine or linear)", l.kind));
  }
  if (l.warmup_steps < 0)
    fail(at + "warmup_steps", fmt::format("must be >= 0, got {}", l.warmup_steps));
  in_range(at + "final_fraction", l.final_fraction, 0.0, 1.0, false);
}

void check_cluster(const ClusterSpec& c) {
  one_of("cluster.transport", c.transport, kTransports, "transport");
  one_of("cluster.collectives", c.collectives, kCollectives, "collectives");
  if (c.tcp_lanes < 1 || c.tcp_lanes > transport::kMaxWireLanes) {
    fail("cluster.tcp_lanes",
         fmt::format("must be in [1, {}], got {}", transport::kMaxWireLanes, c.tcp_lanes));
  }
  // A week at most: the timeout is a safety net, never a way to switch detection off.
  in_range("cluster.stall_timeout", c.stall_timeout_s, 0.5, 7 * 86400.0, false);
  if (c.max_replans < 0 || c.max_replans > kMaxReplans) {
    fail("cluster.max_replans",
         fmt::format("must be in [0, {}], got {}", kMaxReplans, c.max_replans));
  }
}

void check_composition(const SliceComposition& c, std::int64_t minibatch, std::size_t stage) {
  const auto sizes = [&](const std::vector<std::int64_t>& v, const char* which) {
    const std::string key = fmt::format("pipeline.slices[{}].{}", stage, which);
    if (v.empty()) fail(key, "needs at least one slice");
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] < 1 || v[i] > minibatch) {
        fail(key, fmt::format("entry {} must be in [1, {}], got {}", i, minibatch, v[i]));
      }
      sum += v[i];
    }
    if (sum != minibatch) {
      fail(key,
           fmt::format("slice sizes sum to {}, not the minibatch's {} samples", sum, minibatch));
    }
  };
  sizes(c.forward, "forward");
  sizes(c.backward, "backward");
}

}  // namespace tandem::train
