#include "transport/gloo_collectives.hpp"

#include <fmt/format.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>

#include "transport/collective_group.hpp"
#include "transport/member_thread.hpp"

namespace tandem::transport {
namespace {

// The most bytes of a sim round one Gloo call carries: bounds the zeros a member holds.
constexpr std::size_t kSimCallBytes = std::size_t{4} << 20;

std::string who(std::span<const Endpoint> group, Endpoint member, std::int64_t round) {
  return round_text("Gloo", group, member, round);
}

std::size_t sim_elements(const std::vector<Tensor>& tensors) {
  std::size_t bytes = 0;
  for (const Tensor& t : tensors) bytes += t.nbytes();
  return bytes / sizeof(float);
}

// `elements` zeros through `reduce`, in calls of at most `capacity` from `buffer`: a sum of
// zeros is zeros, yet each call moves its bytes around the ring.
template <class Reduce>
void reduce_zeros(float* buffer, std::size_t capacity, std::size_t elements, Reduce&& reduce) {
  std::memset(buffer, 0, capacity * sizeof(float));
  for (std::size_t left = elements; left > 0;) {
    const std::size_t n = std::min(left, capacity);
    reduce(buffer, n);
    left -= n;
  }
}

}  // namespace

struct GlooCollectives::Member final : MemberThread::Rounds {
  Member(GlooCollectives& collectives, std::span<const Endpoint> group, Endpoint endpoint,
         int index)
      : owner(collectives),
        rank(index),
        thread("Gloo", {group.begin(), group.end()}, endpoint, *this,
               collectives.options_.on_error) {}

  void reduce(MemberRound& round, std::string& step) override { owner.reduce(*this, round, step); }
  // The context may be left mid-protocol: it takes no more reductions.
  void failed() override {
    context.reset();
    buffer.reset();
    capacity = 0;
  }

  GlooCollectives& owner;
  const int rank;  // the index of the member's endpoint in its group
  // The thread's only:
  std::shared_ptr<gloo::Context> context;
  // Where a round's tensors and counters are packed, kept from round to round: a fresh buffer
  // per round cost more than the copies, as the kernel faulted in and zeroed every page of it
  // again. It grows to the largest round and stays that size, so a member holds one more copy
  // of its largest round's tensors while it lives.
  std::unique_ptr<float[]> buffer;
  std::size_t capacity = 0;
  // Declared last: joined before the state its rounds use goes.
  MemberThread thread;

  // The packing buffer for `n` elements; its contents are left as they were.
  float* staging(std::size_t n) {
    if (n > capacity) {
      buffer.reset();  // never hold the old buffer and the new one at once
      capacity = 0;
      buffer = std::make_unique_for_overwrite<float[]>(n);
      capacity = n;
    }
    return buffer.get();
  }
};

GlooCollectives::GlooCollectives(Rendezvous& rendezvous, GlooCollectivesOptions options)
    : options_(std::move(options)), store_(rendezvous, options_.timeout) {
  gloo::transport::tcp::attr attr;
  attr.hostname = options_.hostname;
  attr.iface = options_.iface;
  try {
    device_ = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw std::runtime_error(
        fmt::format("Gloo collectives: no TCP device on {} '{}': {}",
                    options_.iface.empty() ? "host" : "interface",
                    options_.iface.empty() ? options_.hostname : options_.iface, e.what()));
  }
}

GlooCollectives::~GlooCollectives() {
  // Stop every member first, then join: the threads finish their reductions in parallel.
  for (auto& [key, m] : members_) m->thread.stop();
  for (auto& [key, m] : members_) m->thread.join();
}

void GlooCollectives::all_reduce(std::span<const Endpoint> group, Endpoint member,
                                 std::int64_t round, std::vector<Tensor> tensors, bool contributes,
                                 Reduction op, std::function<void()> done) {
  const int rank = member_rank(group, member, who(group, member, round));
  const bool data = !tensors.empty() && tensors.front().device().has_data();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const bool ok = t.defined() &&
                    (data ? t.device().is_cpu() && t.dtype() == DType::f32 : t.device().is_sim());
    if (!ok) {
      throw std::invalid_argument(fmt::format(
          "{}: tensor {} is {}; Gloo reduces f32 tensors on the CPU (or only sim tensors)",
          who(group, member, round), i, t.defined() ? t.describe() : "undefined"));
    }
  }

  Member* m = nullptr;
  {
    std::lock_guard lock(mu_);
    auto& slot = members_[{std::vector<Endpoint>(group.begin(), group.end()), member}];
    if (!slot) slot = std::make_unique<Member>(*this, group, member, rank);
    m = slot.get();
  }
  if (auto failure =
          m->thread.submit({round, std::move(tensors), contributes, op, std::move(done)})) {
    throw GlooCollectivesError(*failure);
  }
}

void GlooCollectives::connect(Member& m) {
  const int size = static_cast<int>(m.thread.group().size());
  auto context = std::make_shared<gloo::rendezvous::Context>(m.rank, size);
  context->setTimeout(options_.timeout);
  gloo::rendezvous::PrefixStore store(options_.key_prefix + "/" + group_key(m.thread.group()),
                                      store_);
  context->connectFullMesh(store, device_);
  m.context = std::move(context);
}

void GlooCollectives::reduce(Member& m, MemberRound& round, std::string& step) {
  const int size = static_cast<int>(m.thread.group().size());
  if (size > 1 && !m.context) connect(m);
  step = "reducing";
  // Small tensors go into one buffer, so that they cost one Gloo call whatever their count,
  // followed by two counters: the number of contributors and of members asking for a mean.
  // Large ones are reduced in place (see GlooCollectivesOptions::in_place_bytes), after the
  // buffer, so that members that disagree on the reduction fail before touching them. Every
  // member splits a round alike, as their tensors have the same sizes and share storage
  // alike (the same model's gradients).
  const bool data = !round.tensors.empty() && round.tensors.front().device().has_data();
  // A tensor whose storage another of the round shares stays packed: reduced in place, it
  // would see the other's result (or be added twice) where a packed one is reduced once.
  std::vector<bool> in_place(round.tensors.size(), false);
  std::size_t total = 0;
  for (std::size_t i = 0; data && i < round.tensors.size(); ++i) {
    const Tensor& t = round.tensors[i];
    in_place[i] = t.numel() > 0 && t.nbytes() >= options_.in_place_bytes &&
                  std::none_of(round.tensors.begin(), round.tensors.end(),
                               [&](const Tensor& o) { return &o != &t && o.shares_storage(t); });
    if (!in_place[i]) total += static_cast<std::size_t>(t.numel());
  }
  const auto reduce = [&](float* p, std::size_t n) {
    gloo::AllreduceOptions opts(m.context);
    opts.setOutput(p, n);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
    // Calls of one round share its tag: they follow one another, in the same order on every
    // member.
    opts.setTag(static_cast<std::uint32_t>(round.round));
    opts.setTimeout(options_.timeout);
    gloo::allreduce(opts);
    reduced_bytes_.fetch_add(n * sizeof(float), std::memory_order_relaxed);
  };
  // Every element is written here (a non-contributor adds zeros): the buffer keeps the
  // previous round's values.
  float* const buffer = m.staging(total + 2);
  if (data && round.contributes) {
    float* out = buffer;
    for (std::size_t i = 0; i < round.tensors.size(); ++i) {
      if (in_place[i]) continue;
      const Tensor& t = round.tensors[i];
      const std::size_t n = static_cast<std::size_t>(t.numel());
      if (n > 0) std::memcpy(out, t.data<float>(), n * sizeof(float));
      out += n;
    }
  } else if (total > 0) {
    std::memset(buffer, 0, total * sizeof(float));
  }
  buffer[total] = round.contributes ? 1.0f : 0.0f;
  buffer[total + 1] = round.op == Reduction::mean ? 1.0f : 0.0f;
  if (size > 1) reduce(buffer, total + 2);
  const float means = buffer[total + 1];
  if (means != 0.0f && means != static_cast<float>(size)) {
    throw std::runtime_error(
        fmt::format("members disagree on the reduction ({} of {} ask for a mean)", means, size));
  }
  // As LocalCollectives: the sum over contributors, scaled by the inverse of their count.
  const float contributors = buffer[total];
  const bool scaled = round.op == Reduction::mean && contributors > 1.0f;
  const float scale = scaled ? 1.0f / contributors : 1.0f;
  if (data) {
    const float* in = buffer;
    for (std::size_t i = 0; i < round.tensors.size(); ++i) {
      Tensor& t = round.tensors[i];
      float* p = t.data<float>();
      const std::int64_t n = t.numel();
      if (in_place[i]) {
        if (!round.contributes) std::memset(p, 0, t.nbytes());
        if (size > 1) reduce(p, static_cast<std::size_t>(n));
        if (scaled) {
          for (std::int64_t k = 0; k < n; ++k) p[k] *= scale;
        }
        continue;
      }
      if (!scaled) {
        if (n > 0) std::memcpy(p, in, static_cast<std::size_t>(n) * sizeof(float));
      } else {
        for (std::int64_t k = 0; k < n; ++k) p[k] = in[k] * scale;
      }
      in += n;
    }
  } else if (size > 1) {
    // Sim tensors: their size in zeros (the buffer's counters were read above).
    const std::size_t n = sim_elements(round.tensors);
    const std::size_t per_call = std::min(n, kSimCallBytes / sizeof(float));
    if (n > 0) reduce_zeros(m.staging(per_call), per_call, n, reduce);
  }
}

}  // namespace tandem::transport
