// Under ThreadSanitizer the kernels' oneTBB loops run on the calling thread: libtbb is not
// instrumented, so TSan cannot see the hand-offs inside its task scheduler and reports them as
// races. These tests check the actors' concurrency (stages on 2 workers, collectives, timers),
// which stays fully visible; the kernels' parallel loops are checked by the numerics tests.
#if defined(__SANITIZE_THREAD__)
#include <oneapi/tbb/global_control.h>

namespace {
const tbb::global_control one_tbb_thread(tbb::global_control::max_allowed_parallelism, 1);
}  // namespace
#endif
