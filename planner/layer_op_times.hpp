#pragma once
// A profiled layer's time as the ops a schedule runs (F, B, W), each split into a part every
// slice pays and a part that scales with the slice's samples. The planner's stage costs and the
// sim device's durations (apps/bench_run.hpp) both read a profile through it, so a bench's
// prediction charges what the planner planned with.
#include "planner/profile.hpp"

namespace tandem::planner {

// One op on a minibatch of Profile::minibatch samples. On a slice of n samples it takes
// fixed + scaled * n / minibatch.
struct OpTime {
  double fixed = 0;
  double scaled = 0;
};

// F, B (the input gradient) and W (the weight gradient) of one layer. The backward's fixed part
// is charged to the input gradient, up to all of its time; the weight gradient's fixed part is
// what remains of it.
struct LayerOpTimes {
  OpTime forward;
  OpTime backward_input;
  OpTime backward_weight;
};

LayerOpTimes layer_op_times(const LayerProfile& layer);

}  // namespace tandem::planner
