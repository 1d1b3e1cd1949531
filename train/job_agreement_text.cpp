#include "train/job_agreement_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>

namespace tandem::train {
namespace {

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    out.emplace_back(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return out;
}

// The key of a "key: value" line ("model" for every layer's line).
std::string key_of(const std::string& line) {
  return line.substr(0, std::min(line.find(':'), line.find(' ')));
}

struct Difference {
  std::string key;    // the line's key
  std::string rank0;  // rank 0's line
  std::string other;  // the other rank's
};

// The first line where rank 0's description and another rank's differ.
std::optional<Difference> first_difference(const std::vector<std::string>& rank0,
                                           const std::vector<std::string>& other) {
  for (std::size_t i = 0; i < std::max(rank0.size(), other.size()); ++i) {
    const std::string a = i < rank0.size() ? rank0[i] : "(nothing)";
    const std::string b = i < other.size() ? other[i] : "(nothing)";
    if (a != b) return Difference{key_of(i < rank0.size() ? a : b), a, b};
  }
  return std::nullopt;
}

// Another process's line as this one shows it: every byte outside printable ASCII as \xNN, and
// at most kShownLine characters of that, so that a peer's words can neither move a terminal's
// cursor nor fill a log.
constexpr std::size_t kShownLine = 300;
std::string shown(std::string_view line) {
  std::string out;
  std::size_t taken = 0;
  for (; taken < line.size(); ++taken) {
    const auto u = static_cast<unsigned char>(line[taken]);
    const bool plain = u >= 0x20 && u < 0x7f && u != '\\';
    if (out.size() + (plain ? 1 : 4) > kShownLine) break;
    if (plain) {
      out += static_cast<char>(u);
    } else {
      out += fmt::format("\\x{:02x}", u);
    }
  }
  if (taken < line.size()) out += fmt::format("... ({} bytes)", line.size());
  return out;
}

}  // namespace

std::string description_text(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) {
    out += l;
    out += '\n';
  }
  return out;
}

AgreementCheck check_against_rank0(std::string_view rank0_text,
                                   const std::vector<std::string>& mine) {
  AgreementCheck out;
  const std::optional<Difference> d = first_difference(lines_of(rank0_text), mine);
  if (!d) return out;
  // The answer: the difference's three lines, as much of each as rank 0 shows (it escapes them).
  const auto head = [](const std::string& line) { return line.substr(0, kShownLine); };
  out.answer = head(d->key) + "\n" + head(d->rank0) + "\n" + head(d->other);
  out.refusal.emplace(shown(d->key), "this rank's job differs from rank 0's: rank 0 has '" +
                                         shown(d->rank0) + "', this rank '" + shown(d->other) +
                                         "'");
  return out;
}

std::optional<JobError> refusal_of_answer(std::span<const std::byte> answer, const std::string& who,
                                          int rank) {
  if (answer.empty()) return std::nullopt;
  const std::vector<std::string> lines =
      lines_of(std::string_view(reinterpret_cast<const char*>(answer.data()), answer.size()));
  // Another rank's words, shown but never trusted for more: three lines, each bounded.
  const auto line = [&](std::size_t i) {
    return i < lines.size() ? shown(lines[i]) : std::string("?");
  };
  const std::string them = rank >= 0 ? "rank " + std::to_string(rank) : std::string("the joiner");
  return JobError(line(0), who + " runs another job than rank 0: rank 0 has '" + line(1) + "', " +
                               them + " '" + line(2) + "'");
}

}  // namespace tandem::train
