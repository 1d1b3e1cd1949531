// The core's side of NcclCollectives: the factory the CUDA plugin registers.
#include <atomic>
#include <stdexcept>
#include <string>

#include "runtime/detail/device_backend.hpp"
#include "runtime/plugin.hpp"
#include "transport/nccl_collectives.hpp"

namespace tandem::transport {
namespace {

std::atomic<NcclFactory> registered{nullptr};

NcclFactory factory() {
  if (NcclFactory f = registered.load(std::memory_order_acquire)) return f;
  (void)detail::cuda_backend();  // loads the CUDA plugin, which registers its factory
  return registered.load(std::memory_order_acquire);
}

}  // namespace

void register_nccl_factory(NcclFactory f) {
  registered.store(f, std::memory_order_release);
}

bool nccl_available() {
  return factory() != nullptr;
}

std::unique_ptr<Collectives> make_nccl_collectives(Rendezvous& rendezvous,
                                                   NcclCollectivesOptions options) {
  if (NcclFactory f = factory()) return f(rendezvous, std::move(options));
  std::string why = plugin_problem("cuda");
  if (why.empty()) why = "the CUDA plugin was built without NCCL";
  throw std::runtime_error(
      "NCCL collectives: this build has no NCCL (" + why +
      "; configure with nvcc present and NCCL found: the CUDA toolkit's, PyTorch's nvidia-nccl "
      "wheel, or NCCL_ROOT)");
}

}  // namespace tandem::transport
