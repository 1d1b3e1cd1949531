// `tandem trace summarize FILE`: per-replica utilization, bubble fraction and the measured step
// time of a pipeline trace (`tandem train --trace FILE`) beside the simulator's prediction for
// the same plan, with the durations the trace measured.
#include <iostream>
#include <memory>
#include <string>

#include "apps/commands.hpp"
#include "apps/trace_summary.hpp"

namespace tandem::apps {

void add_trace_command(CLI::App& app) {
  CLI::App* cmd =
      app.add_subcommand("trace", "read pipeline traces written by `tandem train --trace`");
  cmd->require_subcommand(1);
  auto file = std::make_shared<std::string>();
  CLI::App* summarize = cmd->add_subcommand(
      "summarize",
      "per-replica utilization, bubble, and the measured step time beside the simulator's");
  summarize->add_option("file", *file, "trace (Chrome JSON) from `tandem train --trace FILE`")
      ->required();
  summarize->callback([file] { std::cout << format_trace_summary(summarize_trace_file(*file)); });
}

}  // namespace tandem::apps
