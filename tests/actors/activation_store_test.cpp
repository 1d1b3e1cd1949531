// What a stage's forwards keep for their backwards (actors/activation_store): kept and taken by
// chunk, minibatch and first sample in any order, UMPIPE's backward slices cut from and joined
// across kept forwards in sample order, split backwards' state kept for W, bytes and peak
// counted, and missing or duplicate keys refused by name.
#include "actors/activation_store.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/model.hpp"
#include "models/model_spec.hpp"

namespace tandem::actors {
namespace {

using schedules::Slice;

// Rows `first`, `first` + 1, ... of one column: a row's value names its sample.
Tensor rows_from(std::int64_t first, std::int64_t n) {
  std::vector<float> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(static_cast<float>(first + i));
  return Tensor::from_vector(v, {n, 1});
}

std::vector<float> values(const Tensor& t) {
  return t.to_float_vector();
}

// An MLP's first layer as chunk 0 and the rest as chunk 1: its saved state is cut by rows.
struct Store {
  models::Model model = models::Model::build(models::mlp_spec({2, 3, 2}));
  ActivationStore store{&model, {{0, 1}, {1, model.num_layers()}}};
};

// A forward of samples `s` on chunk 0 whose one layer kept rows `first`.. and whose gradient of
// the loss is rows 100 + `first`..
KeptForward forward(Slice s, std::int64_t first, std::int64_t version) {
  KeptForward f;
  f.slice = s;
  f.saved = {models::Saved{rows_from(first, s.size())}};
  f.dlogits = rows_from(100 + first, s.size());
  f.version = version;
  return f;
}

std::vector<float> saved_values(const BackwardState& b) {
  EXPECT_EQ(b.saved.size(), 1u);
  EXPECT_EQ(b.saved.front().size(), 1u);
  return values(b.saved.front().front());
}

TEST(ActivationStore, KeepsAndTakesForwardsInAnyOrder) {
  Store s;
  s.store.keep(0, 1, forward({0, 2}, 10, 1));
  s.store.keep(0, 0, forward({0, 2}, 0, 0));
  s.store.keep(1, 0, forward({0, 2}, 20, 0));
  EXPECT_EQ(s.store.size(), 3u);
  EXPECT_EQ(s.store.peak(), 3u);
  // Each forward keeps two rows of saved state and two of dlogits, 4 bytes each.
  EXPECT_EQ(s.store.bytes(), 3u * 16u);

  BackwardState b = s.store.take_for_backward(0, 0, {0, 2});
  EXPECT_TRUE(b.pieces.empty());
  EXPECT_EQ(saved_values(b), (std::vector<float>{0, 1}));
  EXPECT_EQ(values(b.dlogits), (std::vector<float>{100, 101}));
  EXPECT_EQ(b.version, 0);
  EXPECT_EQ(b.released, (std::vector<std::int64_t>{0}));
  b = s.store.take_for_backward(1, 0, {0, 2});
  EXPECT_EQ(saved_values(b), (std::vector<float>{20, 21}));
  b = s.store.take_for_backward(0, 1, {0, 2});
  EXPECT_EQ(saved_values(b), (std::vector<float>{10, 11}));
  EXPECT_EQ(b.released, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(s.store.size(), 0u);
  EXPECT_EQ(s.store.bytes(), 0u);
  EXPECT_EQ(s.store.peak(), 3u);
}

TEST(ActivationStore, CutsABackwardSliceOutOfAKeptForward) {
  Store s;
  s.store.keep(0, 2, forward({0, 4}, 0, 5));
  BackwardState b = s.store.take_for_backward(0, 2, {1, 3});
  ASSERT_EQ(b.pieces.size(), 1u);
  EXPECT_EQ(b.sizes, (std::vector<std::int64_t>{2}));
  EXPECT_TRUE(b.released.empty());  // samples 0 and 3 have not gone back
  s.store.join(0, b, models::cpu_kernels());
  EXPECT_EQ(saved_values(b), (std::vector<float>{1, 2}));
  EXPECT_EQ(values(b.dlogits), (std::vector<float>{101, 102}));
  EXPECT_EQ(b.version, 5);
  EXPECT_EQ(s.store.bytes(), 32u);

  b = s.store.take_for_backward(0, 2, {0, 1});
  s.store.join(0, b, models::cpu_kernels());
  EXPECT_EQ(saved_values(b), (std::vector<float>{0}));
  b = s.store.take_for_backward(0, 2, {3, 4});
  s.store.join(0, b, models::cpu_kernels());
  EXPECT_EQ(saved_values(b), (std::vector<float>{3}));
  EXPECT_EQ(values(b.dlogits), (std::vector<float>{103}));
  EXPECT_EQ(b.released, (std::vector<std::int64_t>{5}));
  EXPECT_EQ(s.store.size(), 0u);
  EXPECT_EQ(s.store.bytes(), 0u);
}

TEST(ActivationStore, JoinsSeveralKeptForwardsInSampleOrder) {
  Store s;
  s.store.keep(0, 0, forward({3, 4}, 3, 0));
  s.store.keep(0, 0, forward({1, 3}, 1, 0));
  s.store.keep(0, 0, forward({0, 1}, 0, 0));
  // Another minibatch's forward of the same samples is not taken.
  s.store.keep(0, 1, forward({0, 4}, 50, 1));

  // Backward [0, 2): all of [0, 1) and the first half of [1, 3).
  BackwardState b = s.store.take_for_backward(0, 0, {0, 2});
  EXPECT_EQ(b.sizes, (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(b.released, (std::vector<std::int64_t>{0}));
  s.store.join(0, b, models::cpu_kernels());
  EXPECT_EQ(saved_values(b), (std::vector<float>{0, 1}));
  EXPECT_EQ(values(b.dlogits), (std::vector<float>{100, 101}));

  // Backward [2, 4): the rest of [1, 3) and all of [3, 4); both forwards are done.
  b = s.store.take_for_backward(0, 0, {2, 4});
  EXPECT_EQ(b.sizes, (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(b.released, (std::vector<std::int64_t>{0, 0}));
  s.store.join(0, b, models::cpu_kernels());
  EXPECT_EQ(saved_values(b), (std::vector<float>{2, 3}));
  EXPECT_EQ(values(b.dlogits), (std::vector<float>{102, 103}));

  EXPECT_EQ(s.store.size(), 1u);
  EXPECT_EQ(s.store.bytes(), 32u);
  b = s.store.take_for_backward(0, 1, {0, 4});
  EXPECT_EQ(saved_values(b), (std::vector<float>{50, 51, 52, 53}));
  EXPECT_EQ(s.store.bytes(), 0u);
  EXPECT_EQ(s.store.peak(), 4u);
}

TEST(ActivationStore, ARematerializedForwardIsTakenWholeOnly) {
  Store s;
  KeptForward f;
  f.slice = {0, 2};
  f.input = rows_from(7, 2);
  f.recompute = true;
  f.version = 3;
  s.store.keep(0, 0, f);
  EXPECT_EQ(s.store.bytes(), 8u);
  EXPECT_THROW((void)s.store.take_for_backward(0, 0, {0, 1}), std::logic_error);
  EXPECT_EQ(s.store.size(), 1u);  // nothing taken
  const BackwardState b = s.store.take_for_backward(0, 0, {0, 2});
  EXPECT_TRUE(b.recompute);
  EXPECT_EQ(values(b.input), (std::vector<float>{7, 8}));
  EXPECT_FALSE(b.dlogits.defined());
  EXPECT_EQ(b.released, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(s.store.bytes(), 0u);
}

TEST(ActivationStore, KeepsASplitBackwardsStateForItsW) {
  Store s;
  s.store.keep_pending_weight(1, 4, {2, 4}, PendingWeight{{models::Saved{rows_from(2, 2)}}, 6});
  s.store.keep_pending_weight(1, 4, {0, 2}, PendingWeight{{models::Saved{rows_from(0, 2)}}, 6});
  EXPECT_EQ(s.store.pending_weights(), 2u);
  const PendingWeight w = s.store.take_pending_weight(1, 4, {0, 2});
  EXPECT_EQ(w.version, 6);
  EXPECT_EQ(values(w.saved.front().front()), (std::vector<float>{0, 1}));
  EXPECT_EQ(values(s.store.take_pending_weight(1, 4, {2, 4}).saved.front().front()),
            (std::vector<float>{2, 3}));
  EXPECT_EQ(s.store.pending_weights(), 0u);
  EXPECT_EQ(s.store.bytes(), 0u);  // W's state is not counted with the forwards'
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ActivationStore, NamesTheKeyOfWhatIsMissingOrDuplicated) {
  Store s;
  s.store.keep(0, 3, forward({0, 2}, 0, 0));
  EXPECT_EQ(error_of([&] {
              s.store.keep(0, 3, forward({0, 4}, 0, 0));
            }),
            "a forward is already kept for chunk 0 minibatch 3 samples [0,4)");
  EXPECT_EQ(error_of([&] {
              (void)s.store.take_for_backward(1, 3, {0, 2});
            }),
            "no forward kept for backward of chunk 1 minibatch 3 samples [0,2)");
  EXPECT_EQ(error_of([&] {
              (void)s.store.take_for_backward(0, 3, {2, 4});
            }),
            "no forward kept for backward of chunk 0 minibatch 3 samples [2,4)");
  EXPECT_EQ(error_of([&] {
              (void)s.store.take_pending_weight(0, 3, {0, 2});
            }),
            "no split backward kept for W of chunk 0 minibatch 3 samples [0,2)");
  s.store.keep_pending_weight(0, 3, {0, 2}, PendingWeight{});
  EXPECT_EQ(error_of([&] {
              s.store.keep_pending_weight(0, 3, {0, 2}, PendingWeight{});
            }),
            "a split backward is already kept for W of chunk 0 minibatch 3 samples [0,2)");
  EXPECT_EQ(s.store.size(), 1u);
  EXPECT_EQ(s.store.bytes(), 16u);
}

}  // namespace
}  // namespace tandem::actors
