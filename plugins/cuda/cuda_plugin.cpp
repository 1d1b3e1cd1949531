// The CUDA plugin's entry point (runtime/plugin.hpp): registers each part of the CUDA back end
// with the layer that uses it. Called once, by load_plugin("cuda"), under the loader's lock.
#include "models/executor.hpp"
#include "runtime/detail/device_backend.hpp"
#include "transport/cuda_ipc_memory.hpp"
#include "transport/nccl_collectives.hpp"

extern "C" __attribute__((visibility("default"))) void tandem_plugin_register_v1() {
  tandem::detail::register_cuda_backend(tandem::detail::make_cuda_backend());
  tandem::models::register_cuda_executor_factory(&tandem::models::make_cuda_executor);
  tandem::transport::register_cuda_ipc_backend(&tandem::transport::cuda_ipc_plugin_backend());
#if TANDEM_HAVE_NCCL
  tandem::transport::register_nccl_factory(&tandem::transport::make_nccl);
#endif
}
