// `tandem devices`: what this build can run on. Without a GPU (or without the CUDA backend)
// it says so and exits cleanly.
#include <fmt/format.h>

#include <thread>

#include "apps/commands.hpp"
#include "runtime/device.hpp"

namespace tandem::apps {

void add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the devices this build can use");
  cmd->callback([] {
    fmt::print("cpu: {} hardware thread(s)\n", std::thread::hardware_concurrency());
    if (!cuda_backend_built()) {
      fmt::print("cuda: backend not built (CPU-only build)\n");
      return;
    }
    const int count = cuda_device_count();
    if (count == 0) {
      fmt::print("cuda: backend built, no CUDA device\n");
    } else {
      for (int i = 0; i < count; ++i) fmt::print("cuda:{}\n", i);
    }
  });
}

}  // namespace tandem::apps
