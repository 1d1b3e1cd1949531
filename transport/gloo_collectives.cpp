#include "transport/gloo_collectives.hpp"

#include <fmt/format.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <thread>

#include "transport/collective_group.hpp"

namespace tandem::transport {
namespace {

std::string who(std::span<const Endpoint> group, Endpoint member, std::int64_t round) {
  return fmt::format("Gloo all-reduce round {} among {{{}}} as endpoint {}", round,
                     members_text(group, ","), member);
}

}  // namespace

struct GlooCollectives::Member {
  struct Job {
    std::int64_t round = 0;
    std::vector<Tensor> tensors;
    bool contributes = false;
    Reduction op = Reduction::sum;
    std::function<void()> done;
  };

  std::vector<Endpoint> group;
  Endpoint endpoint = 0;
  int rank = 0;  // the index of `endpoint` in `group`
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;
  bool stop = false;
  std::string error;  // the first failure; the member takes no reduction after it
  std::shared_ptr<gloo::Context> context;  // its thread only
  // Where a round's tensors and counters are packed, kept from round to round (its thread only):
  // a fresh buffer per round cost more than the copies, as the kernel faulted in and zeroed
  // every page of it again. It grows to the largest round and stays that size, so a member
  // holds one more copy of its largest round's tensors while it lives.
  std::unique_ptr<float[]> buffer;
  std::size_t capacity = 0;
  std::thread thread;

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
  for (auto& [key, m] : members_) {
    std::lock_guard lock(m->mu);
    m->stop = true;
    m->cv.notify_one();
  }
  for (auto& [key, m] : members_) {
    if (m->thread.joinable()) m->thread.join();
  }
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
    if (!slot) {
      slot = std::make_unique<Member>();
      slot->group.assign(group.begin(), group.end());
      slot->endpoint = member;
      slot->rank = rank;
      slot->thread = std::thread([this, p = slot.get()] { run(*p); });
    }
    m = slot.get();
  }
  std::lock_guard lock(m->mu);
  if (!m->error.empty()) throw GlooCollectivesError(m->error);
  m->queue.push_back({round, std::move(tensors), contributes, op, std::move(done)});
  m->cv.notify_one();
}

void GlooCollectives::run(Member& m) {
  const int size = static_cast<int>(m.group.size());
  for (;;) {
    Member::Job job;
    {
      std::unique_lock lock(m.mu);
      m.cv.wait(lock, [&] { return m.stop || !m.queue.empty(); });
      if (m.stop) return;
      job = std::move(m.queue.front());
      m.queue.pop_front();
    }
    const std::string where = who(m.group, m.endpoint, job.round);
    std::string step = "connecting";
    try {
      if (size > 1 && !m.context) {
        auto context = std::make_shared<gloo::rendezvous::Context>(m.rank, size);
        context->setTimeout(options_.timeout);
        gloo::rendezvous::PrefixStore store(options_.key_prefix + "/" + group_key(m.group), store_);
        context->connectFullMesh(store, device_);
        m.context = std::move(context);
      }
      step = "reducing";
      // Small tensors go into one buffer, so that they cost one Gloo call whatever their count,
      // followed by two counters: the number of contributors and of members asking for a mean.
      // Large ones are reduced in place (see GlooCollectivesOptions::in_place_bytes), after the
      // buffer, so that members that disagree on the reduction fail before touching them. Every
      // member splits a round alike, as their tensors have the same sizes and share storage
      // alike (the same model's gradients).
      const bool data = !job.tensors.empty() && job.tensors.front().device().has_data();
      // A tensor whose storage another of the round shares stays packed: reduced in place, it
      // would see the other's result (or be added twice) where a packed one is reduced once.
      std::vector<bool> in_place(job.tensors.size(), false);
      std::size_t total = 0;
      for (std::size_t i = 0; data && i < job.tensors.size(); ++i) {
        const Tensor& t = job.tensors[i];
        in_place[i] = t.numel() > 0 && t.nbytes() >= options_.in_place_bytes &&
                      std::none_of(job.tensors.begin(), job.tensors.end(), [&](const Tensor& o) {
                        return &o != &t && o.shares_storage(t);
                      });
        if (!in_place[i]) total += static_cast<std::size_t>(t.numel());
      }
      const auto reduce = [&](float* p, std::size_t n) {
        gloo::AllreduceOptions opts(m.context);
        opts.setOutput(p, n);
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
        // Calls of one round share its tag: they follow one another, in the same order on every
        // member.
        opts.setTag(static_cast<std::uint32_t>(job.round));
        opts.setTimeout(options_.timeout);
        gloo::allreduce(opts);
      };
      // Every element is written here (a non-contributor adds zeros): the buffer keeps the
      // previous round's values.
      float* const buffer = m.staging(total + 2);
      if (data && job.contributes) {
        float* out = buffer;
        for (std::size_t i = 0; i < job.tensors.size(); ++i) {
          if (in_place[i]) continue;
          const Tensor& t = job.tensors[i];
          const std::size_t n = static_cast<std::size_t>(t.numel());
          if (n > 0) std::memcpy(out, t.data<float>(), n * sizeof(float));
          out += n;
        }
      } else if (total > 0) {
        std::memset(buffer, 0, total * sizeof(float));
      }
      buffer[total] = job.contributes ? 1.0f : 0.0f;
      buffer[total + 1] = job.op == Reduction::mean ? 1.0f : 0.0f;
      if (size > 1) reduce(buffer, total + 2);
      const float means = buffer[total + 1];
      if (means != 0.0f && means != static_cast<float>(size)) {
        throw std::runtime_error(fmt::format(
            "members disagree on the reduction ({} of {} ask for a mean)", means, size));
      }
      // As LocalCollectives: the sum over contributors, scaled by the inverse of their count.
      const float contributors = buffer[total];
      const bool scaled = job.op == Reduction::mean && contributors > 1.0f;
      const float scale = scaled ? 1.0f / contributors : 1.0f;
      if (data) {
        const float* in = buffer;
        for (std::size_t i = 0; i < job.tensors.size(); ++i) {
          Tensor& t = job.tensors[i];
          float* p = t.data<float>();
          const std::int64_t n = t.numel();
          if (in_place[i]) {
            if (!job.contributes) std::memset(p, 0, t.nbytes());
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
      }
      step = "completing";
      job.done();
    } catch (const std::exception& e) {
      const std::string message = fmt::format("{}: {} failed: {}", where, step, e.what());
      spdlog::error("{}", message);
      {
        std::lock_guard lock(m.mu);
        m.error = message;
        m.queue.clear();
      }
      if (options_.on_error) options_.on_error(message);
      // The context may be left mid-protocol: it takes no more reductions.
      m.context.reset();
      m.buffer.reset();
      m.capacity = 0;
      std::unique_lock lock(m.mu);
      m.cv.wait(lock, [&] { return m.stop; });
      return;
    }
  }
}

}  // namespace tandem::transport
