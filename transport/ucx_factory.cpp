// The core's side of the ucx data plane: the factory the UCX plugin registers.
#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/plugin.hpp"
#include "transport/ucx_data_plane.hpp"

namespace tandem::transport {
namespace {

std::atomic<UcxFactory> registered{nullptr};

UcxFactory factory() {
  if (UcxFactory f = registered.load(std::memory_order_acquire)) return f;
  (void)load_plugin("ucx");  // registers the factory
  return registered.load(std::memory_order_acquire);
}

}  // namespace

void register_ucx_factory(UcxFactory f) {
  registered.store(f, std::memory_order_release);
}

bool ucx_available() {
  return factory() != nullptr;
}

std::unique_ptr<UcxDataPlane> make_ucx_channel(ActorSystem& system, UcxChannelOptions options) {
  if (UcxFactory f = factory()) return f(system, std::move(options));
  throw std::runtime_error("the ucx data plane cannot be loaded (" + plugin_problem("ucx") +
                           "): install libtandem_ucx.so beside the core's libraries, or use "
                           "cluster.transport: tcp");
}

}  // namespace tandem::transport
