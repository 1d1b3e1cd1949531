// `tandem trace summarize FILE`: per-replica utilization, bubble fraction and the measured step
// time of a pipeline trace (`tandem train --trace FILE`) beside the simulator's prediction for
// the same plan, with the durations the trace measured.
// `tandem trace merge OUT IN...`: the traces the ranks of a multi-process job recorded, one per
// rank, as one trace of the job on one clock (train/trace_merge.hpp).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/output_file.hpp"
#include "apps/trace_summary.hpp"
#include "train/trace_file.hpp"
#include "train/trace_merge.hpp"

namespace tandem::apps {
namespace {

void add_merge(CLI::App& trace) {
  struct Args {
    std::string out;
    std::vector<std::string> inputs;
  };
  auto args = std::make_shared<Args>();
  CLI::App* merge = trace.add_subcommand(
      "merge", "one trace of a multi-process job from its ranks' traces, on one clock");
  merge->add_option("out", args->out, "where to write the merged trace")->required();
  merge->add_option("inputs", args->inputs, "every rank's trace of the job, each once")
      ->required()
      ->expected(1, -1);
  merge->callback([args] {
    std::vector<train::TraceInput> inputs;
    for (const std::string& path : args->inputs) {
      check_output("trace merge: OUT", args->out, {path});
      inputs.push_back({path, train::read_trace_file(path)});
    }
    train::write_trace_file(train::merge_traces(inputs), args->out);
    std::cout << "merged " << inputs.size() << " traces into " << args->out << "\n";
  });
}

}  // namespace

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
  add_merge(*cmd);
}

}  // namespace tandem::apps
