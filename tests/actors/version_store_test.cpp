#include "actors/version_store.hpp"

#include <gtest/gtest.h>

namespace tandem::actors {
namespace {

models::ParamSet one(float v) {
  models::ParamSet p;
  p.add("w", Tensor::full({2}, v));
  return p;
}

TEST(VersionStore, PinnedVersionsSurviveCollection) {
  VersionStore store(one(0));
  store.pin(0);
  models::ParamSet next = store.begin_update(/*min_needed=*/1);
  EXPECT_TRUE(next[0].shares_storage(store.get(0)[0]));  // pinned: shared, the update copies
  next[0] = Tensor::full({2}, 1);
  store.publish(next);
  store.collect(1);
  EXPECT_TRUE(store.holds(0));
  store.unpin(0);
  store.collect(1);
  EXPECT_FALSE(store.holds(0));
  EXPECT_EQ(store.latest(), 1);
  EXPECT_EQ(store.peak_held(), 2u);
}

TEST(VersionStore, UnneededLatestIsHandedOverForAnInPlaceUpdate) {
  VersionStore store(one(0));
  models::ParamSet next = store.begin_update(1);
  EXPECT_TRUE(next[0].storage_unique());
  store.publish(next);
  EXPECT_EQ(store.held(), 1u);
}

TEST(VersionStore, AVersionAFutureForwardNeedsIsKept) {
  VersionStore store(one(0));
  store.publish(store.begin_update(/*min_needed=*/0));
  store.collect(0);
  EXPECT_TRUE(store.holds(0));  // the next forward still uses version 0
  store.collect(1);
  EXPECT_FALSE(store.holds(0));
}

TEST(VersionStore, MisuseIsAnError) {
  VersionStore store(one(0));
  EXPECT_THROW(store.unpin(0), std::logic_error);
  EXPECT_THROW(store.pin(3), std::logic_error);
  EXPECT_THROW((void)store.get(2), std::logic_error);
}

}  // namespace
}  // namespace tandem::actors
