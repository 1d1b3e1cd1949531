// Builds without NCCL: NcclCollectives exists so that callers need no #if, and says why it cannot
// run.
#include <stdexcept>

#include "transport/nccl_collectives.hpp"

namespace tandem::transport {

struct NcclCollectives::Member {};

NcclCollectives::NcclCollectives(Rendezvous& rendezvous, NcclCollectivesOptions options)
    : options_(std::move(options)), rendezvous_(rendezvous) {
  throw std::runtime_error(
      "NCCL collectives: this build has no NCCL (configure with nvcc present and NCCL found: "
      "the CUDA toolkit's, PyTorch's nvidia-nccl wheel, or NCCL_ROOT)");
}

NcclCollectives::~NcclCollectives() = default;

void NcclCollectives::all_reduce(std::span<const Endpoint>, Endpoint, std::int64_t,
                                 std::vector<Tensor>, bool, Reduction, std::function<void()>) {
  throw std::logic_error("NcclCollectives::all_reduce without a CUDA backend");
}

}  // namespace tandem::transport
