// Global gradient-norm clipping makes every stage of a flush schedule SYNC before each STEP, in
// one meeting per round (the norm spans the whole model); asynchronous schedules refuse it, and
// the text form carries it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/text_form.hpp"
#include "schedules/validator.hpp"

namespace tandem::schedules {
namespace {

ScheduleParams global(ScheduleKind kind, std::vector<int> replicas, int slices, int chunks = 1) {
  ScheduleParams p;
  p.kind = kind;
  p.stages = static_cast<int>(replicas.size());
  p.replicas = std::move(replicas);
  p.slices = slices;
  p.chunks = chunks;
  p.minibatch_size = 8;
  p.minibatches = 3;
  p.global_sync = true;
  return p;
}

TEST(GlobalSync, EveryDeviceSyncsBeforeEachStepOfEveryFlushKind) {
  const std::vector<ScheduleParams> all = {
      global(ScheduleKind::gpipe, {1, 1, 1, 1}, 4), global(ScheduleKind::one_f_one_b, {2, 1, 1}, 4),
      global(ScheduleKind::zb_h1, {1, 1, 1, 1}, 4), global(ScheduleKind::interleaved, {1, 1}, 4, 2),
      global(ScheduleKind::umpipe, {1, 1, 1}, 2),   global(ScheduleKind::naive, {1, 1, 1}, 2),
  };
  for (const ScheduleParams& p : all) {
    SCOPED_TRACE(to_string(p.kind));
    const ActionList list = Schedule(p).materialize();
    EXPECT_NO_THROW(validate(list));
    for (int d = 0; d < p.total_replicas(); ++d) {
      std::int64_t syncs = 0, steps = 0;
      const std::vector<Action>& actions = list.devices[static_cast<std::size_t>(d)];
      for (std::size_t i = 0; i < actions.size(); ++i) {
        if (actions[i].op == Op::SYNC) ++syncs;
        if (actions[i].op != Op::STEP) continue;
        ++steps;
        ASSERT_GT(i, 0u);
        EXPECT_EQ(actions[i - 1].op, Op::SYNC) << "device " << d;
      }
      EXPECT_EQ(steps, 3) << "device " << d;
      EXPECT_EQ(syncs, steps) << "device " << d;
    }
  }
}

TEST(GlobalSync, AsynchronousKindsAndPredictionRefuseIt) {
  for (const ScheduleKind kind : {ScheduleKind::pipedream, ScheduleKind::pipedream_vsync,
                                  ScheduleKind::pipedream_2bw, ScheduleKind::forward}) {
    ScheduleParams p = global(kind, {1, 1, 1, 1}, kind == ScheduleKind::pipedream_2bw ? 4 : 1);
    try {
      p.validate();
      ADD_FAILURE() << to_string(kind) << " accepted global_sync";
    } catch (const ScheduleError& e) {
      EXPECT_NE(std::string(e.what()).find("global_sync"), std::string::npos) << e.what();
    }
  }
}

TEST(GlobalSync, TheTextFormCarriesIt) {
  const ActionList list = Schedule(global(ScheduleKind::one_f_one_b, {1, 1, 1}, 3)).materialize();
  const std::string text = format_actions(list);
  EXPECT_NE(text.find(" globalsync"), std::string::npos) << text;
  const ActionList back = parse_actions(text);
  EXPECT_TRUE(back.params.global_sync);
  EXPECT_NO_THROW(validate(back));
  // Without it the header says nothing of it.
  ScheduleParams plain = global(ScheduleKind::one_f_one_b, {1, 1, 1}, 3);
  plain.global_sync = false;
  EXPECT_EQ(format_actions(Schedule(plain).materialize()).find("globalsync"), std::string::npos);
}

}  // namespace
}  // namespace tandem::schedules
