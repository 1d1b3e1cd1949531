#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "schedules/action_generator.hpp"
#include "schedules/detail/pattern.hpp"

namespace tandem::schedules {

struct ActionGenerator::State {
  // `rounds` patterns from `factory`; rounds == 0: unbounded.
  State(detail::PatternFactory make_round, std::int64_t round_count)
      : factory(std::move(make_round)), rounds(round_count) {}

  detail::PatternFactory factory;
  std::int64_t rounds;
  bool finite = false;
  std::int64_t round = 0;
  detail::Pattern pattern;
  bool in_round = false;
  std::int64_t forwards_done = 0;
  std::int64_t backwards_done = 0;
  std::vector<Action> buffer;
  std::size_t read = 0;
};

}  // namespace tandem::schedules
