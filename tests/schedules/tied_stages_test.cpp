// Stages tied by a shared parameter (ScheduleParams::tied_stages) SYNC before every STEP, even
// unreplicated, and their SYNCs of a round meet: every schedule stays runnable, a custom order
// that leaves a tied stage out of a round is refused, and the text form carries the ties.
#include <gtest/gtest.h>

#include <string>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/text_form.hpp"
#include "schedules/validator.hpp"

namespace tandem::schedules {
namespace {

ScheduleParams tied(ScheduleKind kind, int stages, int slices, int chunks = 1) {
  ScheduleParams p;
  p.kind = kind;
  p.stages = stages;
  p.slices = slices;
  p.chunks = chunks;
  p.minibatch_size = 8;
  p.minibatches = 3;
  p.tied_stages = {{0, stages - 1}};
  return p;
}

// Per device: the rounds of its SYNCs and of its STEPs, in order.
void expect_sync_before_every_step(const ActionList& list, bool tied_device, int device) {
  std::int64_t syncs = 0, steps = 0;
  for (std::size_t i = 0; i < list.devices[device].size(); ++i) {
    const Action& a = list.devices[device][i];
    if (a.op == Op::SYNC) ++syncs;
    if (a.op != Op::STEP) continue;
    ++steps;
    if (tied_device) {
      ASSERT_GT(i, 0u);
      EXPECT_EQ(list.devices[device][i - 1].op, Op::SYNC) << "device " << device;
      EXPECT_EQ(list.devices[device][i - 1].minibatch, a.minibatch) << "device " << device;
    }
  }
  EXPECT_GT(steps, 0);
  EXPECT_EQ(syncs, tied_device ? steps : 0) << "device " << device;
}

TEST(TiedStages, EveryKindSyncsTheTiedStagesAndStaysRunnable) {
  const std::vector<ScheduleParams> all = {
      tied(ScheduleKind::gpipe, 4, 4),           tied(ScheduleKind::one_f_one_b, 4, 4),
      tied(ScheduleKind::naive, 3, 2),           tied(ScheduleKind::zb_h1, 4, 4),
      tied(ScheduleKind::zb_2p, 3, 4),           tied(ScheduleKind::interleaved, 2, 4, 2),
      tied(ScheduleKind::umpipe, 3, 2),          tied(ScheduleKind::pipedream, 4, 1),
      tied(ScheduleKind::pipedream_vsync, 4, 1), tied(ScheduleKind::pipedream_2bw, 4, 4),
  };
  for (const ScheduleParams& p : all) {
    SCOPED_TRACE(to_string(p.kind));
    const ActionList list = Schedule(p).materialize();
    EXPECT_NO_THROW(validate(list));
    for (int d = 0; d < p.total_replicas(); ++d) {
      expect_sync_before_every_step(list, d == 0 || d == p.stages - 1, d);
    }
  }
}

TEST(TiedStages, TheTextFormCarriesTheTies) {
  ScheduleParams p = tied(ScheduleKind::one_f_one_b, 4, 4);
  p.tied_stages = {{0, 3}, {1, 2, 3}};
  const ActionList list = Schedule(p).materialize();
  const std::string text = format_actions(list);
  EXPECT_NE(text.find(" ties=0+3,1+2+3"), std::string::npos) << text;
  const ActionList back = parse_actions(text);
  EXPECT_EQ(back.params.tied_stages, p.tied_stages);
  EXPECT_NO_THROW(validate(back));
}

TEST(TiedStages, ARoundATiedStageSkipsIsRefused) {
  ActionList list = Schedule(tied(ScheduleKind::gpipe, 2, 2)).materialize();
  // Device 1 drops its SYNC of round 1: device 0 would wait there for ever.
  auto& d1 = list.devices[1];
  for (auto it = d1.begin(); it != d1.end(); ++it) {
    if (it->op == Op::SYNC && it->minibatch == 1) {
      d1.erase(it);
      break;
    }
  }
  try {
    validate(list);
    FAIL() << "a tied stage without its SYNC passed";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("every stage tied to it"), std::string::npos) << e.what();
  }
}

std::string params_error(ScheduleParams p) {
  try {
    p.validate();
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

TEST(TiedStages, BadTiesAreRefusedNamingThem) {
  ScheduleParams p = tied(ScheduleKind::gpipe, 4, 4);
  p.tied_stages = {{2}};
  EXPECT_NE(params_error(p).find("fewer than two"), std::string::npos);
  p.tied_stages = {{0, 4}};
  EXPECT_NE(params_error(p).find("names stage 4 of 4"), std::string::npos);
  p.tied_stages = {{3, 1}};
  EXPECT_NE(params_error(p).find("not strictly ascending"), std::string::npos);
  p.tied_stages = {{1, 1}};
  EXPECT_NE(params_error(p).find("not strictly ascending"), std::string::npos);
  ScheduleParams pd = tied(ScheduleKind::pipedream, 2, 1);
  pd.replicas = {2, 1};
  EXPECT_NE(params_error(pd).find("PipeDream ties only unreplicated stages"), std::string::npos);
  EXPECT_THROW((void)parse_actions("schedule gpipe stages=2 ties=0+x\n"), ScheduleError);
}

}  // namespace
}  // namespace tandem::schedules
