#pragma once
// The thread that runs Event::on_complete callbacks. Completions arrive on threads that must
// not run user code (a stream's worker would stall its queue; CUDA's host-function thread must
// not call CUDA), so they only hand the callback over; this thread runs it.
#include <functional>

namespace tandem::detail {

// Queues fn for the progress thread (started on first use). Never runs fn on the caller's
// thread, except after process shutdown has stopped the progress thread, when there is no
// other thread left to run it. Does not throw: a callback that cannot be queued is logged.
void post_to_progress_thread(std::function<void()> fn) noexcept;
bool on_progress_thread();

}  // namespace tandem::detail
