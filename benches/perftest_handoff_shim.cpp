// LD_PRELOAD into ucx_perftest: grafts UcxChannel's threading onto UCX's own benchmark, so that
// what our threading costs can be told apart from what the rest of our path costs
// (scripts/bench-handoff-shim; its figures are in docs/benchmarks.md's git history).
//   every received message (a completed ucp_tag_recv_nbx, or with TANDEM_SHIM_AM=1 an active
//   message's arrival) wakes a helper thread through a condition variable, as the channel's
//   progress thread hands each arrival to an actor worker; the helper does ~1 us of work, then
//   spins TANDEM_SHIM_SPIN_US (default 50, the workers' spin) on sched_yield before it waits;
//   TANDEM_SHIM_YIELD=1: ucp_worker_progress that found nothing yields the core, as the
//   channel's poll loop does.
// A diagnostic, not part of Tandem: it wraps the three UCX entry points ucx_perftest calls.
#include <dlfcn.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace {

// Never destroyed: the helper still waits on them when the process exits.
std::mutex& mu = *new std::mutex;
std::condition_variable& cv = *new std::condition_variable;
bool pending = false;
std::once_flag started;

bool env_set(const char* name) {
  return std::getenv(name) != nullptr;
}

void helper() {
  const char* v = std::getenv("TANDEM_SHIM_SPIN_US");
  const auto spin = std::chrono::microseconds(v != nullptr ? std::atoi(v) : 50);
  for (;;) {
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [] { return pending; });
      pending = false;
    }
    bool more = true;
    while (more) {
      volatile double work = 0;  // ~1 us, what an actor does with a delivered message
      for (int i = 0; i < 300; ++i) work = work + i;
      more = false;
      const auto until = std::chrono::steady_clock::now() + spin;
      while (!more && std::chrono::steady_clock::now() < until) {
        {
          std::lock_guard lock(mu);
          more = pending;
          pending = false;
        }
        if (!more) std::this_thread::yield();
      }
    }
  }
}

void hand_off() {
  std::call_once(started, [] { std::thread(helper).detach(); });
  {
    std::lock_guard lock(mu);
    pending = true;
  }
  cv.notify_one();
}

template <typename Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

struct TagReceive {
  ucp_tag_recv_nbx_callback_t cb;
  void* user_data;
};

void on_tag_received(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                     void* user_data) {
  auto* r = static_cast<TagReceive*>(user_data);
  hand_off();
  r->cb(request, status, info, r->user_data);
  delete r;
}

struct AmHandler {
  ucp_am_recv_callback_t cb;
  void* arg;
};

ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data, size_t length,
                   const ucp_am_recv_param_t* param) {
  const auto* h = static_cast<const AmHandler*>(arg);
  hand_off();
  return h->cb(h->arg, header, header_length, data, length, param);
}

}  // namespace

extern "C" ucs_status_ptr_t ucp_tag_recv_nbx(ucp_worker_h worker, void* buffer, size_t count,
                                             ucp_tag_t tag, ucp_tag_t tag_mask,
                                             const ucp_request_param_t* param) {
  using Fn = ucs_status_ptr_t (*)(ucp_worker_h, void*, size_t, ucp_tag_t, ucp_tag_t,
                                  const ucp_request_param_t*);
  static const Fn real = next<Fn>("ucp_tag_recv_nbx");
  if (param == nullptr || (param->op_attr_mask & UCP_OP_ATTR_FIELD_CALLBACK) == 0) {
    hand_off();  // no completion callback to hook: hand off when the receive is posted
    return real(worker, buffer, count, tag, tag_mask, param);
  }
  ucp_request_param_t p = *param;
  const bool has_user_data = (param->op_attr_mask & UCP_OP_ATTR_FIELD_USER_DATA) != 0;
  p.user_data = new TagReceive{param->cb.recv, has_user_data ? param->user_data : nullptr};
  p.cb.recv = &on_tag_received;
  // Completions always through the callback, so that every receive hands off exactly once.
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  return real(worker, buffer, count, tag, tag_mask, &p);
}

extern "C" ucs_status_t ucp_worker_set_am_recv_handler(ucp_worker_h worker,
                                                       const ucp_am_handler_param_t* param) {
  using Fn = ucs_status_t (*)(ucp_worker_h, const ucp_am_handler_param_t*);
  static const Fn real = next<Fn>("ucp_worker_set_am_recv_handler");
  if (!env_set("TANDEM_SHIM_AM") || (param->field_mask & UCP_AM_HANDLER_PARAM_FIELD_CB) == 0) {
    return real(worker, param);
  }
  ucp_am_handler_param_t p = *param;
  const bool has_arg = (param->field_mask & UCP_AM_HANDLER_PARAM_FIELD_ARG) != 0;
  p.cb = &on_am;
  p.arg = new AmHandler{param->cb, has_arg ? param->arg : nullptr};  // lives as the handler does
  p.field_mask |= UCP_AM_HANDLER_PARAM_FIELD_ARG;
  return real(worker, &p);
}

extern "C" unsigned ucp_worker_progress(ucp_worker_h worker) {
  using Fn = unsigned (*)(ucp_worker_h);
  static const Fn real = next<Fn>("ucp_worker_progress");
  static const bool yield = env_set("TANDEM_SHIM_YIELD");
  const unsigned n = real(worker);
  if (n == 0 && yield) std::this_thread::yield();
  return n;
}
