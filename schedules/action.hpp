#pragma once
#include <cstdint>
#include <string>

namespace tandem::schedules {

// F: forward; B: backward (input gradient, plus the weight gradient unless a W follows);
// W: weight gradient (zero-bubble schedules); STEP: optimizer update, publishes a version;
// SYNC: all-reduce of gradients among the replicas of a stage.
enum class Op : std::uint8_t { F, B, W, STEP, SYNC };

// Samples [begin, end) of one minibatch.
struct Slice {
  std::int64_t begin = 0;
  std::int64_t end = 0;

  std::int64_t size() const { return end - begin; }
  bool overlaps(const Slice& other) const { return begin < other.end && other.begin < end; }
  friend bool operator==(const Slice&, const Slice&) = default;
};

// One step of a schedule on one replica.
struct Action {
  Op op = Op::F;
  // F, B, W: the minibatch (2BW: the batch). STEP, SYNC: the update round, so STEP with round k
  // publishes version k + 1 of the stage's weights.
  std::int64_t minibatch = 0;
  Slice slice;      // F, B, W only
  int chunk = 0;    // model chunk on this device (interleaved schedules), else 0
  int replica = 0;  // replica of the stage that runs the action
  // B: also computes the weight gradient; false when a W for the same samples follows (split
  // backward, zero-bubble).
  bool with_weight = true;
  // F: keeps only its stage input (re-materialization); B: recomputes the stage's forward right
  // before it.
  bool recompute = false;
  // B with its weight gradient: it is the only contribution to its round's gradient on this
  // device, and the round's STEP (round == minibatch) comes right after it, with no SYNC
  // between. The update may then be written straight into the next weights inside the
  // backward (a stateless optimizer: plain SGD). Set only by InPlaceUpdates (in_place_updates.hpp);
  // generators leave it false.
  bool update_in_place = false;

  friend bool operator==(const Action&, const Action&) = default;
};

const char* to_string(Op op);
// "[2,4)".
std::string to_string(const Slice& slice);
// For messages: "F(mb 0, [2,4))", "B(mb 3, [0,8), chunk 1)", "STEP(round 2)".
std::string to_string(const Action& action);

}  // namespace tandem::schedules
