// NCCL's collectives behind the Collectives interface. A one-rank world on the control plane
// (NCCL runs one rank per GPU, and the test machines have at most one). The argument checks run
// in every build with NCCL; the reductions skip with "no CUDA device" without a GPU; a build
// without NCCL checks that the class says it cannot run. Every wait has a timeout.
#include "transport/nccl_collectives.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/tensor.hpp"
#include "tests/runtime/require_gpu.hpp"

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;

void expect_contains(const std::string& text, std::string_view part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << text << "' lacks '" << part << "'";
}

class NcclCollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RendezvousOptions o;
    o.rank = 0;
    o.world_size = 1;
    o.job_token = "nccl-test";
    o.host_name = "host-0";
    rendezvous_ = std::make_unique<Rendezvous>(o);
    rendezvous_->join(20s);
  }
  void TearDown() override { rendezvous_->shutdown(20s); }

  Rendezvous& rendezvous() { return *rendezvous_; }

 private:
  std::unique_ptr<Rendezvous> rendezvous_;
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

#if !TANDEM_HAVE_NCCL

TEST_F(NcclCollectivesTest, SaysABuildWithoutNcclCannotRunIt) {
  const std::string error = error_of([&] { (void)make_nccl_collectives(rendezvous(), {}); });
  expect_contains(error, "this build has no NCCL");
}

#else

// Counts completions in the order they came.
class Done {
 public:
  std::function<void()> make(int id) {
    return [this, id] {
      std::lock_guard lock(mu_);
      order_.push_back(id);
      cv_.notify_all();
    };
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 20s, [&] { return order_.size() >= n; });
  }
  std::vector<int> order() {
    std::lock_guard lock(mu_);
    return order_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> order_;
};

TEST_F(NcclCollectivesTest, RefusesTensorsThatAreNotF32OnACudaDevice) {
  NcclCollectives c(rendezvous(), {});
  const std::vector<Endpoint> group{4};
  const std::string error = error_of([&] {
    c.all_reduce(group, 4, 0, {Tensor::zeros({3}, DType::f32)}, true, Reduction::sum, [] {});
  });
  expect_contains(error, "NCCL all-reduce round 0 among {4} as endpoint 4");
  expect_contains(error, "NCCL reduces f32 tensors on one cuda device");
}

TEST_F(NcclCollectivesTest, RefusesAMemberOutsideItsGroupAndAGroupNamingOneTwice) {
  NcclCollectives c(rendezvous(), {});
  const std::vector<Endpoint> group{1, 2};
  expect_contains(error_of([&] { c.all_reduce(group, 3, 7, {}, true, Reduction::sum, [] {}); }),
                  "endpoint 3 is not a member");
  const std::vector<Endpoint> twice{1, 2, 1};
  expect_contains(error_of([&] { c.all_reduce(twice, 1, 7, {}, true, Reduction::sum, [] {}); }),
                  "the group names a member twice");
}

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

Tensor on_gpu(const std::vector<float>& v) {
  Tensor host = Tensor::empty({static_cast<std::int64_t>(v.size())}, DType::f32);
  std::copy(v.begin(), v.end(), host.data<float>());
  return host.to(Device::cuda(0));
}

TEST_F(NcclCollectivesTest, OneRankSumAndMeanLeaveTheValuesAndCallDone) {
  TANDEM_REQUIRE_GPU();
  NcclCollectives c(rendezvous(), {});
  const std::vector<Endpoint> group{9};
  const std::vector<float> a = random_values(1000, 1);
  const std::vector<float> b = random_values(37, 2);
  Tensor ta = on_gpu(a);
  Tensor tb = on_gpu(b);
  Done done;
  c.all_reduce(group, 9, 0, {ta, tb}, true, Reduction::sum, done.make(0));
  ASSERT_TRUE(done.wait_for(1));
  EXPECT_EQ(ta.to_float_vector(), a);
  EXPECT_EQ(tb.to_float_vector(), b);
  c.all_reduce(group, 9, 1, {ta, tb}, true, Reduction::mean, done.make(1));
  ASSERT_TRUE(done.wait_for(2));
  EXPECT_EQ(ta.to_float_vector(), a);
  EXPECT_EQ(tb.to_float_vector(), b);
}

TEST_F(NcclCollectivesTest, ANonContributorReceivesZeros) {
  TANDEM_REQUIRE_GPU();
  NcclCollectives c(rendezvous(), {});
  const std::vector<Endpoint> group{9};
  Tensor t = on_gpu(random_values(513, 3));
  Done done;
  c.all_reduce(group, 9, 0, {t}, false, Reduction::mean, done.make(0));
  ASSERT_TRUE(done.wait_for(1));
  EXPECT_EQ(t.to_float_vector(), std::vector<float>(513, 0.0f));
}

TEST_F(NcclCollectivesTest, RoundsCompleteInTheOrderTheyStarted) {
  TANDEM_REQUIRE_GPU();
  NcclCollectives c(rendezvous(), {});
  const std::vector<Endpoint> group{9};
  Tensor t = on_gpu(random_values(1 << 16, 4));
  Done done;
  for (int r = 0; r < 6; ++r) c.all_reduce(group, 9, r, {t}, true, Reduction::sum, done.make(r));
  ASSERT_TRUE(done.wait_for(6));
  EXPECT_EQ(done.order(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST_F(NcclCollectivesTest, RefusesTensorsThatOverlapOrSitOnAnotherDevice) {
  TANDEM_REQUIRE_GPU();
  NcclCollectives c(rendezvous(), {});
  const std::vector<Endpoint> group{9};
  Tensor t = on_gpu(random_values(10, 5));
  expect_contains(
      error_of([&] {
        c.all_reduce(group, 9, 0, {t.slice(0, 6), t.slice(4, 10)}, true, Reduction::sum, [] {});
      }),
      "two tensors overlap in memory");
  expect_contains(error_of([&] {
                    c.all_reduce(group, 9, 0, {t, t}, true, Reduction::sum, [] {});
                  }),
                  "two tensors overlap in memory");
  expect_contains(
      error_of([&] {
        c.all_reduce(group, 9, 0, {t, Tensor::zeros({2}, DType::f32)}, true, Reduction::sum, [] {});
      }),
      "tensor 1 is f32[2] cpu");
}

#endif

}  // namespace
}  // namespace tandem::transport
