#include "schedules/report.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/schedule_error.hpp"
#include "schedules/simulator.hpp"
#include "schedules/timeline_svg.hpp"

namespace tandem::schedules {
namespace {

// A minimal XML check: tags balance, one root element, no stray '<' or '&' in text.
// Returns the root's name, or an error message starting with "error".
std::string check_xml(const std::string& xml) {
  std::vector<std::string> open;
  std::string root;
  std::size_t i = 0;
  while (i < xml.size()) {
    if (xml[i] == '&') return "error: & at " + std::to_string(i);
    if (xml[i] != '<') {
      ++i;
      continue;
    }
    const auto close = xml.find('>', i);
    if (close == std::string::npos) return "error: unterminated tag at " + std::to_string(i);
    std::string tag = xml.substr(i + 1, close - i - 1);
    if (tag.find('<') != std::string::npos)
      return "error: '<' inside a tag at " + std::to_string(i);
    i = close + 1;
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "error: stray </" + tag;
      open.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    if (open.empty()) {
      if (!root.empty()) return "error: second root <" + name + ">";
      root = name;
    }
    if (!self_closing) open.push_back(name);
  }
  if (!open.empty()) return "error: <" + open.back() + "> not closed";
  return root;
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

ActionList sample_list() {
  ScheduleParams sp;
  sp.kind = ScheduleKind::interleaved;
  sp.stages = 2;
  sp.slices = 4;
  sp.chunks = 2;
  return Schedule(sp).materialize();
}

TEST(ScheduleTimelineSvg, IsWellFormedWithOneBoxPerAction) {
  for (const ActionList& list : {sample_list(), [] {
                                   ScheduleParams zb;
                                   zb.kind = ScheduleKind::zb_h1;
                                   zb.stages = 3;
                                   zb.slices = 5;
                                   return Schedule(zb).materialize();
                                 }()}) {
    const auto result = simulate(list, SimulationCosts::uniform(list.params.stages, 1, 2, 1, 0.2));
    const std::string svg = timeline_svg(list, result);
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_EQ(check_xml(svg), "svg");
    EXPECT_EQ(count(svg, "<rect class=\"op\""), list.size());
    // W boxes have their own colour, present only where B is split.
    EXPECT_EQ(svg.find("#b07aa1") != std::string::npos, list.params.kind == ScheduleKind::zb_h1);
  }
}

TEST(ScheduleTimelineSvg, NeedsTheTimeline) {
  const ActionList list = sample_list();
  Simulator sim;
  const auto& result = sim.run(list, SimulationCosts::uniform(2, 1, 2), false);
  EXPECT_THROW(timeline_svg(list, result), ScheduleError);
}

TEST(ScheduleReport, TableAsciiAndJson) {
  ScheduleParams sp;
  sp.kind = ScheduleKind::one_f_one_b;
  sp.stages = 4;
  sp.slices = 8;
  const ActionList list = Schedule(sp).materialize();
  const auto r = simulate(list, SimulationCosts::uniform(4, 1, 2));
  const std::string table = format_report(list, r);
  EXPECT_NE(table.find("makespan 33"), std::string::npos) << table;
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(count(table, "\nd" + std::to_string(d) + " "), 1u) << table;
  }
  const std::string ascii = format_ascii_timeline(list, r, 66);  // 2 columns per time unit
  // Device 3 starts F0 after three forwards upstream: 6 idle columns, then "F0".
  EXPECT_NE(ascii.find("d3   |......F0"), std::string::npos) << ascii;
  EXPECT_EQ(count(ascii, "|\n"), 4u);
  const auto j = nlohmann::json::parse(format_json(list, r));
  EXPECT_EQ(j["makespan"].get<double>(), r.makespan);
  EXPECT_EQ(j["devices"].size(), 4u);
  EXPECT_EQ(j["devices"][1]["peak_in_flight"].get<int>(), 3);
  EXPECT_EQ(j["timeline"].size(), list.size());
}

}  // namespace
}  // namespace tandem::schedules
