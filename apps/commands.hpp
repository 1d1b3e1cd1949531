#pragma once
// Each `tandem` subcommand lives in its own file and registers itself here.
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tandem::apps {

// `tandem demo`: the runtime self-test.
void add_demo_command(CLI::App& app);

// `tandem devices`: the CPU threads and CUDA devices this build can use.
void add_devices_command(CLI::App& app);

// `tandem simulate`: time a schedule with the discrete-event simulator (table, ASCII, SVG).
void add_simulate_command(CLI::App& app);

// `tandem train [CONFIG.yaml] [--metrics-json FILE] [--trace FILE] [--steps N] [--quiet]`:
// training on one device or a pipeline; no config: the embedded default pipeline
// (apps/default_config.hpp).
void add_train_command(CLI::App& app);

// `tandem plan --profile P.json --cluster C.yaml --schedule S [-o FILE]`: stages, replicas and
// slices from a layer profile and a cluster; writes the config's pipeline: section.
void add_plan_command(CLI::App& app);

// `tandem profile CONFIG.yaml -o P.json [--repeats N] [--warmup N] [--minibatch B]`: per-layer
// forward / backward times and sizes of the config's model, as `tandem plan` reads them.
void add_profile_command(CLI::App& app);

// `tandem trace summarize FILE`: utilization, bubble and measured step time of a pipeline trace
// (`tandem train --trace FILE`) beside the simulator's prediction with the measured durations.
void add_trace_command(CLI::App& app);

// `tandem bench CONFIG [--steps N] [--profile P.json] [--json]`: runs the config's plan for N
// steps; samples/s, per-replica utilization, bubble and step time beside the simulator's
// prediction (apps/bench_run.hpp).
void add_bench_command(CLI::App& app);

// `tandem checkpoint inspect DIR` and `tandem checkpoint export DIR -o FILE`: a checkpoint's
// contents, and its newest weights as one whole-model file (train/model_file.hpp).
void add_checkpoint_command(CLI::App& app);

// `tandem predict CONFIG --weights W --input FILE -o FILE`: the model's outputs through the
// forward-only pipeline (train/predict.hpp).
void add_predict_command(CLI::App& app);

// `tandem launch`: N local processes as the ranks of one job (apps/local_launcher.hpp).
void add_launch_command(CLI::App& app, std::optional<std::vector<std::string>> program);

// `tandem launch [its options] -- PROGRAM ARGS...`: the program and its arguments, which the
// command line parser never sees (CLI11 takes what follows `--` as positionals); `argc` is cut
// to end before the `--`. None (argc unchanged) for any other command line, including a `--`
// among a config's arguments (`tandem launch -n 2 c.yaml -- x`).
std::optional<std::vector<std::string>> split_launch_program(int& argc, char** argv);

}  // namespace tandem::apps
