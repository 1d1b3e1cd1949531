#include "schedules/text_form.hpp"

#include <gtest/gtest.h>

#include <string>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/simulator.hpp"
#include "schedules/validator.hpp"

namespace tandem::schedules {
namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_actions(text);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& text, const std::string& needle) {
  EXPECT_NE(text.find(needle), std::string::npos) << "'" << needle << "' not in: " << text;
}

TEST(ScheduleTextForm, RoundTripsEverySchedule) {
  std::vector<ScheduleParams> all;
  for (auto kind : {ScheduleKind::naive, ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                    ScheduleKind::zb_h1, ScheduleKind::pipedream_2bw}) {
    ScheduleParams sp;
    sp.kind = kind;
    sp.stages = 3;
    sp.slices = 4;
    sp.minibatches = 2;
    all.push_back(sp);
  }
  ScheduleParams il;
  il.kind = ScheduleKind::interleaved;
  il.stages = 2;
  il.slices = 4;
  il.chunks = 2;
  all.push_back(il);
  ScheduleParams pd;
  pd.kind = ScheduleKind::pipedream;
  pd.stages = 3;
  pd.replicas = {2, 1, 1};
  pd.minibatches = 7;
  pd.minibatch_size = 16;
  all.push_back(pd);
  ScheduleParams um;
  um.kind = ScheduleKind::umpipe;
  um.stages = 2;
  um.forward_slices = {{1, 3}, {2, 2}};
  um.backward_slices = {{3, 1}, {1, 1, 2}};
  all.push_back(um);
  ScheduleParams gp;
  gp.kind = ScheduleKind::gpipe;
  gp.stages = 2;
  gp.slices = 3;
  gp.minibatch_size = 10;  // unequal "equal" slices: 3, 3, 4
  gp.rematerialize = true;
  gp.replicas = {1, 2};
  all.push_back(gp);
  for (const auto& sp : all) {
    const ActionList list = Schedule(sp).materialize();
    const std::string text = format_actions(list);
    const ActionList back = parse_actions(text);
    EXPECT_EQ(back.devices, list.devices) << text;
    EXPECT_EQ(format_actions(back), text);
    EXPECT_EQ(back.params.kind, sp.kind);
    EXPECT_EQ(back.params.rematerialize, sp.rematerialize);
    EXPECT_EQ(back.params.samples(), sp.samples());
    EXPECT_EQ(back.params.minibatches, sp.minibatches);
    EXPECT_EQ(back.params.replicas_of(0), sp.replicas_of(0));
    if (sp.kind == ScheduleKind::umpipe) {
      // The compositions come back from the tokens, so the routing matches the generator's.
      EXPECT_EQ(back.params.forward_slices, sp.forward_slices);
      EXPECT_EQ(back.params.backward_slices, sp.backward_slices);
    }
    EXPECT_NO_THROW(validate(back)) << text;
  }
}

TEST(ScheduleTextForm, ReadsWhatPeopleWrite) {
  const ActionList list = parse_actions(
      "# 1F1B by hand\n"
      "schedule custom stages=2 slices=2\n"
      "\n"
      "d0: F0 F1 B0 B1 STEP\r\n"
      "d1:   F0 B0\tF1 B1 STEP\n");
  ASSERT_EQ(list.devices.size(), 2u);
  EXPECT_EQ(list.devices[1][2], (Action{Op::F, 0, {1, 2}, 0, 0}));
  validate(list);
  EXPECT_NEAR(simulate(list, SimulationCosts::uniform(2, 1, 2)).makespan, 9, 1e-9);
  // Without a header: one stage per line, one sample per slice, explicit slices allowed.
  const ActionList bare = parse_actions("d0: F0[0:1) B0[0:1) F1 STEP STEP5 SYNC2\n");
  EXPECT_EQ(bare.params.kind, ScheduleKind::custom);
  EXPECT_EQ(bare.devices[0][0].slice, (Slice{0, 1}));
  EXPECT_EQ(bare.devices[0][2].minibatch, 1);
  // replicas= alone gives the stage count.
  EXPECT_EQ(
      parse_actions("schedule gpipe replicas=2,1\nd0: STEP\nd1: STEP\nd2: STEP\n").params.stages,
      2);
  EXPECT_EQ(bare.devices[0][4], (Action{Op::STEP, 5, {}, 0, 0}));
  EXPECT_EQ(bare.devices[0][5], (Action{Op::SYNC, 2, {}, 0, 0}));
}

TEST(ScheduleTextForm, ErrorsNameLineColumnAndToken) {
  expect_contains(parse_error("schedule gpipe stages=1\nd0: F0 Fx B0\n"),
                  "line 2, column 8, token 'Fx': expected a number after F");
  expect_contains(parse_error("d0: F0 Q1\n"), "line 1, column 8, token 'Q1'");
  expect_contains(parse_error("d1: F0\n"), "line 1, column 1, token 'd1:': expected 'd0:'");
  expect_contains(parse_error("schedule warp stages=1\n"), "token 'warp': unknown schedule");
  expect_contains(parse_error("schedule gpipe colour=red\n"), "unknown key 'colour'");
  expect_contains(parse_error("schedule gpipe stages=2\nd0: F0\n"),
                  "1 device lines, but the header describes 2 devices");
  expect_contains(parse_error("d0: F0[3:1)\n"), "token 'F0[3:1)': empty slice");
  expect_contains(parse_error("d0: F0[3:4\n"), "expected [begin:end)");
  // A slice lies within its minibatch, [0, samples).
  expect_contains(parse_error("schedule custom slices=2\nd0: F0[0:1000000000) B0[0:2) STEP\n"),
                  "line 2, column 5, token 'F0[0:1000000000)': the slice is outside its "
                  "minibatch [0:2) (2 samples");
  expect_contains(parse_error("schedule custom slices=2 minibatch=8\nd0: F0 F1 B0[6:9)\n"),
                  "column 11, token 'B0[6:9)': the slice is outside its minibatch [0:8)");
  expect_contains(parse_error("d0: F0[0:3)\n"), "outside its minibatch [0:1)");
  EXPECT_EQ(
      parse_actions("schedule custom slices=2 minibatch=8\nd0: F0[6:8)\n").devices[0][0].slice,
      (Slice{6, 8}));
  expect_contains(parse_error("d0: F0c\n"), "expected a chunk number");
  expect_contains(parse_error("d0: F0x\n"), "unexpected 'x'");
  expect_contains(parse_error("d0: F0\nschedule gpipe\n"), "header must come before");
  expect_contains(parse_error("schedule interleaved stages=2 slices=3 chunks=2\n"),
                  "line 1: schedule interleaved");
  expect_contains(parse_error("d0: STEPx\n"), "expected a non-negative integer for the round");
  expect_contains(parse_error("d0: SYNC2c1\n"), "token 'SYNC2c1'");
}

}  // namespace
}  // namespace tandem::schedules
