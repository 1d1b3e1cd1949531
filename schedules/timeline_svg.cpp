#include "schedules/timeline_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "schedules/schedule_error.hpp"
#include "schedules/text_form.hpp"

namespace tandem::schedules {
namespace {

constexpr double kLabelWidth = 70;
constexpr double kRowHeight = 28;
constexpr double kBoxHeight = 22;
constexpr double kTop = 10;
constexpr double kAxis = 30;
constexpr double kRight = 20;

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

const char* colour(Op op) {
  switch (op) {
    case Op::F:
      return "#4e79a7";
    case Op::B:
      return "#59a14f";
    case Op::W:
      return "#b07aa1";
    case Op::STEP:
      return "#555555";
    case Op::SYNC:
      return "#f28e2b";
  }
  return "#000000";
}

// A tick step of 1, 2 or 5 times a power of ten giving about ten ticks.
double tick_step(double span) {
  if (span <= 0) return 1;
  const double raw = span / 10;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (raw <= m * power) return m * power;
  }
  return 10 * power;
}

}  // namespace

std::string timeline_svg(const ActionList& list, const SimulationResult& r) {
  if (r.timeline.size() != list.size()) {
    throw ScheduleError("timeline svg: the simulation result has no timeline for this list");
  }
  const auto& p = list.params;
  const double span = r.makespan > 0 ? r.makespan : 1;
  const double scale = std::clamp(1000.0 / span, 2.0, 60.0);  // pixels per time unit
  const double width = kLabelWidth + span * scale + kRight;
  const double rows = static_cast<double>(list.devices.size());
  const double height = kTop + rows * kRowHeight + kAxis;
  std::string out;
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt(width) + "\" height=\"" +
         fmt(height) + "\" viewBox=\"0 0 " + fmt(width) + " " + fmt(height) +
         "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  out +=
      "<title>" + std::string(to_string(p.kind)) + ": makespan " + fmt(r.makespan) + "</title>\n";
  for (std::size_t d = 0; d < list.devices.size(); ++d) {
    const double y = kTop + static_cast<double>(d) * kRowHeight;
    out += "<text x=\"4\" y=\"" + fmt(y + kBoxHeight * 0.7) + "\">d" + std::to_string(d) + " s" +
           std::to_string(p.stage_of(static_cast<int>(d))) + "</text>\n";
  }
  for (const OpInterval& op : r.timeline) {
    const Action& a = list.devices[op.device][op.index];
    const double x = kLabelWidth + op.start * scale;
    const double w = std::max((op.end - op.start) * scale, 1.0);
    const double y = kTop + op.device * kRowHeight;
    const double shade = p.chunks > 1 ? 1.0 - 0.5 * a.chunk / (p.chunks - 1) : 1.0;
    const std::string label = format_action(p, a);
    out += "<rect class=\"op\" x=\"" + fmt(x) + "\" y=\"" + fmt(y) + "\" width=\"" + fmt(w) +
           "\" height=\"" + fmt(kBoxHeight) + "\" fill=\"" + colour(a.op) + "\" fill-opacity=\"" +
           fmt(shade) + "\" stroke=\"#ffffff\"><title>d" + std::to_string(op.device) + " " +
           to_string(a) + " " + fmt(op.start) + "-" + fmt(op.end) + "</title></rect>\n";
    // The number only: the colour already tells the op.
    const std::string text = a.op == Op::STEP || a.op == Op::SYNC ? "" : label.substr(1);
    if (!text.empty() && w >= 7.0 * static_cast<double>(text.size())) {
      out += "<text x=\"" + fmt(x + w / 2) + "\" y=\"" + fmt(y + kBoxHeight * 0.68) +
             "\" text-anchor=\"middle\" fill=\"#ffffff\">" + text + "</text>\n";
    }
  }
  const double axis_y = kTop + rows * kRowHeight + 4;
  out += "<line x1=\"" + fmt(kLabelWidth) + "\" y1=\"" + fmt(axis_y) + "\" x2=\"" +
         fmt(kLabelWidth + span * scale) + "\" y2=\"" + fmt(axis_y) + "\" stroke=\"#000000\"/>\n";
  const double step = tick_step(span);
  for (double t = 0; t <= span + 1e-9; t += step) {
    const double x = kLabelWidth + t * scale;
    out += "<line x1=\"" + fmt(x) + "\" y1=\"" + fmt(axis_y) + "\" x2=\"" + fmt(x) + "\" y2=\"" +
           fmt(axis_y + 4) + "\" stroke=\"#000000\"/>\n";
    out += "<text x=\"" + fmt(x) + "\" y=\"" + fmt(axis_y + 16) + "\" text-anchor=\"middle\">" +
           fmt(t) + "</text>\n";
  }
  out += "</svg>\n";
  return out;
}

}  // namespace tandem::schedules
