#pragma once
// Back ends that load on first use. The CUDA back end (the device, its kernels, CUDA IPC and
// NCCL) links cudart, cuBLAS and NCCL, which take a third of a second and 200 MB of a process
// merely to load; it is built as a plugin, libtandem_<name>.so, beside the core's libraries, so
// that a CPU-only program or run never maps them. The first call that needs a back end loads
// its plugin and calls the plugin's entry point, `extern "C" void tandem_plugin_register_v1()`,
// which registers its parts with the layers that use them (detail::register_cuda_backend,
// models::register_cuda_executor_factory, transport::register_cuda_ipc_backend,
// transport::register_nccl_factory). A program may also link a plugin directly (the GPU tests
// do): the first use then finds it already loaded and registers it the same way.
#include <string>
#include <string_view>

namespace tandem {

// Loads plugin `name` ("cuda") once per process and registers it: true when it is loaded,
// false when it is not installed (a build without that back end) or could not be loaded (the
// reason is logged once, as a warning, and kept in plugin_problem). Thread-safe; later calls
// return the first call's answer at the cost of a lock.
bool load_plugin(std::string_view name);

// Whether plugin `name` has been loaded; never loads it.
bool plugin_loaded(std::string_view name);

// Why plugin `name` is not loaded ("not installed: <path>" or the loader's error); empty while
// it is loaded or was never asked for.
std::string plugin_problem(std::string_view name);

// Where plugins are looked for: $TANDEM_PLUGIN_DIR when set, else the folder holding the
// core's runtime library (build/lib in a build tree, <prefix>/lib once installed).
std::string plugin_dir();

}  // namespace tandem
