#include "schedules/text_form.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedules/schedule_error.hpp"

namespace tandem::schedules {
namespace {

// The index i with params.equal_slice(i) == slice, if any.
std::optional<std::int64_t> equal_index(const ScheduleParams& p, const Slice& slice) {
  const std::int64_t b = p.samples();
  const std::int64_t m = p.slices;
  const std::int64_t i = (slice.begin * m + b - 1) / b;  // smallest i with i*B/m >= begin
  if (i < m && p.equal_slice(static_cast<int>(i)) == slice) return i;
  return std::nullopt;
}

std::string token(const ScheduleParams& p, const Action& a, std::optional<std::int64_t> count) {
  std::string out = to_string(a.op);
  if (a.op == Op::STEP || a.op == Op::SYNC) {
    if (count && a.minibatch != *count) out += std::to_string(a.minibatch);
    return out;
  }
  if (auto i = equal_index(p, a.slice)) {
    out += std::to_string(a.minibatch * p.slices + *i);
  } else {
    out += std::to_string(a.minibatch);
    out += '[';
    out += std::to_string(a.slice.begin);
    out += ':';
    out += std::to_string(a.slice.end);
    out += ')';
  }
  if (a.chunk != 0) {
    out += 'c';
    out += std::to_string(a.chunk);
  }
  return out;
}

struct Cursor {
  int line;
  std::size_t column;  // 1-based
  std::string_view token;

  [[noreturn]] void fail(const std::string& what) const {
    throw ScheduleError("action list text: line " + std::to_string(line) + ", column " +
                        std::to_string(column) + ", token '" + std::string(token) + "': " + what);
  }
};

std::vector<Cursor> tokens(std::string_view line, int number) {
  std::vector<Cursor> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back({number, start + 1, line.substr(start, i - start)});
  }
  return out;
}

// Reads a non-negative integer at text[pos...]; advances pos.
std::optional<std::int64_t> number(std::string_view text, std::size_t& pos) {
  std::int64_t value = 0;
  const char* first = text.data() + pos;
  const auto [ptr, ec] = std::from_chars(first, text.data() + text.size(), value);
  if (ec != std::errc() || ptr == first || value < 0) return std::nullopt;
  pos += static_cast<std::size_t>(ptr - first);
  return value;
}

std::int64_t whole_number(const Cursor& c, std::string_view text, const char* what) {
  std::size_t pos = 0;
  auto v = number(text, pos);
  if (!v || pos != text.size()) c.fail(std::string("expected a non-negative integer for ") + what);
  return *v;
}

// "0+3,1+2": the stages of each tie, '+' between stages and ',' between ties.
std::vector<std::vector<int>> parse_ties(const Cursor& c, std::string_view value) {
  std::vector<std::vector<int>> ties(1);
  std::size_t start = 0;
  for (std::size_t i = 0; i <= value.size(); ++i) {
    if (i < value.size() && value[i] != '+' && value[i] != ',') continue;
    const auto stage = whole_number(c, value.substr(start, i - start), "ties");
    if (stage > 1'000'000'000) c.fail("ties: stage too large");
    ties.back().push_back(static_cast<int>(stage));
    if (i < value.size() && value[i] == ',') ties.emplace_back();
    start = i + 1;
  }
  return ties;
}

// Returns whether the header gave the stage count.
bool parse_header(const std::vector<Cursor>& toks, ScheduleParams& p) {
  bool stages_given = false;
  if (toks.size() < 2) toks[0].fail("expected the schedule kind after 'schedule'");
  try {
    p.kind = parse_schedule_kind(toks[1].token);
  } catch (const ScheduleError& e) {
    toks[1].fail(e.what());
  }
  for (std::size_t t = 2; t < toks.size(); ++t) {
    const Cursor& c = toks[t];
    if (c.token == "remat") {
      p.rematerialize = true;
      continue;
    }
    if (c.token == "globalsync") {
      p.global_sync = true;
      continue;
    }
    const auto eq = c.token.find('=');
    if (eq == std::string_view::npos) c.fail("expected key=value, remat or globalsync");
    const std::string_view key = c.token.substr(0, eq);
    const std::string_view value = c.token.substr(eq + 1);
    const auto as_int = [&](const char* what) {
      const auto v = whole_number(c, value, what);
      if (v > 1'000'000'000) c.fail(std::string(what) + " is too large");
      return static_cast<int>(v);
    };
    if (key == "stages") {
      p.stages = as_int("stages");
      stages_given = true;
    } else if (key == "chunks") {
      p.chunks = as_int("chunks");
    } else if (key == "slices") {
      p.slices = as_int("slices");
    } else if (key == "minibatch") {
      p.minibatch_size = whole_number(c, value, "minibatch");
    } else if (key == "minibatches") {
      p.minibatches = whole_number(c, value, "minibatches");
    } else if (key == "replicas") {
      p.replicas.clear();
      std::size_t start = 0;
      while (true) {
        const auto comma = value.find(',', start);
        const auto piece = value.substr(
            start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        p.replicas.push_back(static_cast<int>(whole_number(c, piece, "replicas")));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    } else if (key == "ties") {
      p.tied_stages = parse_ties(c, value);
    } else {
      c.fail("unknown key '" + std::string(key) +
             "' (valid: stages, replicas, chunks, slices, minibatch, minibatches, ties, remat)");
    }
  }
  if (!stages_given && !p.replicas.empty()) p.stages = static_cast<int>(p.replicas.size());
  return stages_given || !p.replicas.empty();
}

Action parse_token(const Cursor& c, const ScheduleParams& p, int replica, std::int64_t& steps,
                   std::int64_t& syncs) {
  const std::string_view t = c.token;
  Action a;
  a.replica = replica;
  std::size_t pos = 0;
  for (Op op : {Op::STEP, Op::SYNC}) {
    const std::string_view name = to_string(op);
    if (t.substr(0, name.size()) != name) continue;
    std::int64_t& count = op == Op::STEP ? steps : syncs;
    a.op = op;
    a.minibatch = count;
    pos = name.size();
    if (pos < t.size()) a.minibatch = whole_number(c, t.substr(pos), "the round");
    count = a.minibatch + 1;
    return a;
  }
  switch (t[0]) {
    case 'F':
      a.op = Op::F;
      break;
    case 'B':
      a.op = Op::B;
      break;
    case 'W':
      a.op = Op::W;
      break;
    default:
      c.fail("expected F, B, W, STEP or SYNC");
  }
  pos = 1;
  const auto n = number(t, pos);
  if (!n) c.fail(std::string("expected a number after ") + to_string(a.op));
  if (pos < t.size() && t[pos] == '[') {
    ++pos;
    const auto begin = number(t, pos);
    if (!begin || pos >= t.size() || t[pos] != ':') c.fail("expected [begin:end)");
    ++pos;
    const auto end = number(t, pos);
    if (!end || pos >= t.size() || t[pos] != ')') c.fail("expected [begin:end)");
    ++pos;
    if (*end <= *begin) c.fail("empty slice");
    if (*end > p.samples()) {
      c.fail("the slice is outside its minibatch [0:" + std::to_string(p.samples()) + ") (" +
             std::to_string(p.samples()) + " samples; the header's minibatch= sets them)");
    }
    a.minibatch = *n;
    a.slice = {*begin, *end};
  } else {
    a.minibatch = *n / p.slices;
    a.slice = p.equal_slice(static_cast<int>(*n % p.slices));
  }
  if (pos < t.size() && t[pos] == 'c') {
    ++pos;
    const auto chunk = number(t, pos);
    if (!chunk || *chunk > 1'000'000) c.fail("expected a chunk number after 'c'");
    a.chunk = static_cast<int>(*chunk);
  }
  if (pos != t.size()) c.fail("unexpected '" + std::string(t.substr(pos)) + "'");
  return a;
}

// The flags the text does not spell, set as the generators set them: a B on a (virtual) stage
// that has W actions leaves the weight gradient to them; F and B recompute under remat.
void derive_flags(ActionList& list) {
  const ScheduleParams& p = list.params;
  std::vector<char> split(static_cast<std::size_t>(p.stages) * p.chunks, 0);
  const auto vstage = [&](int d, const Action& a) -> int {
    if (a.chunk < 0 || a.chunk >= p.chunks) return -1;  // the validator names it
    return p.virtual_stage(p.stage_of(d), a.chunk);
  };
  for (int d = 0; d < static_cast<int>(list.devices.size()); ++d) {
    for (const Action& a : list.devices[d]) {
      if (a.op == Op::W && vstage(d, a) >= 0) split[vstage(d, a)] = 1;
    }
  }
  for (int d = 0; d < static_cast<int>(list.devices.size()); ++d) {
    for (Action& a : list.devices[d]) {
      if (a.op == Op::B && vstage(d, a) >= 0 && split[vstage(d, a)]) a.with_weight = false;
      if (a.op == Op::F || a.op == Op::B) a.recompute = p.rematerialize;
    }
  }
}

// The slices of `op` on `device` for its first minibatch, if they are a composition of the
// minibatch; empty otherwise.
std::vector<std::int64_t> composition_of(const ActionList& list, int device, Op op) {
  std::vector<Slice> slices;
  std::int64_t first = -1;
  for (const Action& a : list.devices[device]) {
    if (a.op != op) continue;
    if (first < 0) first = a.minibatch;
    if (a.minibatch == first) slices.push_back(a.slice);
  }
  std::sort(slices.begin(), slices.end(),
            [](const Slice& x, const Slice& y) { return x.begin < y.begin; });
  std::vector<std::int64_t> sizes;
  std::int64_t next = 0;
  for (const Slice& s : slices) {
    if (s.begin != next) return {};
    sizes.push_back(s.size());
    next = s.end;
  }
  if (next != list.params.samples()) return {};
  return sizes;
}

// UMPIPE's compositions are written out in the tokens: read them back, so that the routing (from
// the parameters, as for a generated UMPIPE schedule) sees the slicing the order uses.
void derive_compositions(ActionList& list) {
  ScheduleParams& p = list.params;
  std::vector<std::vector<std::int64_t>> forward(p.stages), backward(p.stages);
  bool any = false;
  for (int s = 0; s < p.stages; ++s) {
    forward[s] = composition_of(list, p.device_of(s, 0), Op::F);
    backward[s] = composition_of(list, p.device_of(s, 0), Op::B);
    any = any || !forward[s].empty() || !backward[s].empty();
  }
  if (!any) return;
  p.forward_slices = std::move(forward);
  p.backward_slices = std::move(backward);
}

}  // namespace

std::string format_action(const ScheduleParams& params, const Action& action) {
  return token(params, action, std::nullopt);
}

std::string format_actions(const ActionList& list) {
  const ScheduleParams& p = list.params;
  std::string out = "schedule ";
  out += to_string(p.kind);
  out += " stages=" + std::to_string(p.stages);
  bool replicated = false;
  for (int r : p.replicas) replicated = replicated || r > 1;
  if (replicated) {
    out += " replicas=";
    for (std::size_t s = 0; s < p.replicas.size(); ++s) {
      if (s) out += ',';
      out += std::to_string(p.replicas[s]);
    }
  }
  if (p.chunks > 1) out += " chunks=" + std::to_string(p.chunks);
  out += " slices=" + std::to_string(p.slices);
  if (p.samples() != p.slices) out += " minibatch=" + std::to_string(p.samples());
  if (p.minibatches != 1) out += " minibatches=" + std::to_string(p.minibatches);
  for (std::size_t t = 0; t < p.tied_stages.size(); ++t) {
    out += t == 0 ? " ties=" : ",";
    for (std::size_t i = 0; i < p.tied_stages[t].size(); ++i) {
      if (i) out += '+';
      out += std::to_string(p.tied_stages[t][i]);
    }
  }
  if (p.rematerialize) out += " remat";
  if (p.global_sync) out += " globalsync";
  out += '\n';
  for (std::size_t d = 0; d < list.devices.size(); ++d) {
    out += 'd';
    out += std::to_string(d);
    out += ':';
    std::int64_t steps = 0;
    std::int64_t syncs = 0;
    for (const Action& a : list.devices[d]) {
      out += ' ';
      if (a.op == Op::STEP) {
        out += token(p, a, steps);
        steps = a.minibatch + 1;
      } else if (a.op == Op::SYNC) {
        out += token(p, a, syncs);
        syncs = a.minibatch + 1;
      } else {
        out += token(p, a, std::nullopt);
      }
    }
    out += '\n';
  }
  return out;
}

ActionList parse_actions(std::string_view text) {
  ActionList list;
  ScheduleParams& p = list.params;
  p.kind = ScheduleKind::custom;
  bool header = false;
  bool stages_known = false;
  int header_line = 0;
  std::vector<std::vector<Cursor>> device_lines;
  int number_of_line = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++number_of_line;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto toks = tokens(line, number_of_line);
    if (toks.empty() || toks[0].token[0] == '#') continue;
    if (toks[0].token == "schedule") {
      if (header)
        toks[0].fail("a second header (the first is on line " + std::to_string(header_line) + ")");
      if (!device_lines.empty()) toks[0].fail("the header must come before the device lines");
      header = true;
      header_line = number_of_line;
      stages_known = parse_header(toks, p);
      continue;
    }
    std::string expected(1, 'd');
    expected += std::to_string(device_lines.size());
    expected += ':';
    if (toks[0].token != expected) toks[0].fail("expected '" + expected + "'");
    device_lines.push_back(std::move(toks));
  }
  if (!stages_known) p.stages = static_cast<int>(device_lines.size());
  try {
    p.validate();
  } catch (const ScheduleError& e) {
    throw ScheduleError("action list text: line " + std::to_string(header_line) + ": " + e.what());
  }
  if (static_cast<int>(device_lines.size()) != p.total_replicas()) {
    throw ScheduleError("action list text: " + std::to_string(device_lines.size()) +
                        " device lines, but the header describes " +
                        std::to_string(p.total_replicas()) + " devices");
  }
  list.devices.resize(device_lines.size());
  for (std::size_t d = 0; d < device_lines.size(); ++d) {
    const int replica = p.replica_of(static_cast<int>(d));
    std::int64_t steps = 0;
    std::int64_t syncs = 0;
    for (std::size_t t = 1; t < device_lines[d].size(); ++t) {
      list.devices[d].push_back(parse_token(device_lines[d][t], p, replica, steps, syncs));
    }
  }
  derive_flags(list);
  if (p.kind == ScheduleKind::umpipe && p.forward_slices.empty() && p.backward_slices.empty()) {
    derive_compositions(list);
  }
  return list;
}

}  // namespace tandem::schedules
