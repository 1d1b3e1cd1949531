// `tandem`: the subcommands of apps/commands.hpp behind one CLI11 parser. Every failure is one
// line "tandem: error: ..." on stderr and an exit code of docs/cli.md: 1 when the run or its
// inputs fail, 2 when the command line is wrong. No raw C++ exception text reaches the user.
#include <filesystem>
#include <iostream>
#include <new>
#include <string>

#include "apps/commands.hpp"
#include "apps/open_files_limit.hpp"
#include "apps/usage_error.hpp"

#ifndef TANDEM_VERSION
#define TANDEM_VERSION "unknown"
#endif

namespace {

int fail(int code, const std::string& what, const std::string& hint = "") {
  std::cerr << "tandem: error: " << what << '\n';
  if (!hint.empty()) std::cerr << hint << '\n';
  return code;
}

// The subcommand the user named, for the help hint ("tandem plan --help").
std::string help_hint(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    return "run 'tandem " + sub->get_name() + " --help' for its options";
  }
  return "run 'tandem --help' for the commands";
}

}  // namespace

int main(int argc, char** argv) {
  namespace apps = tandem::apps;
  apps::raise_open_files_limit();
  CLI::App app{"tandem: pipeline-parallel DNN training runtime", "tandem"};
  app.set_version_flag("--version", "tandem " TANDEM_VERSION);
  app.require_subcommand(0, 1);
  apps::add_demo_command(app);
  apps::add_devices_command(app);
  apps::add_simulate_command(app);
  apps::add_train_command(app);
  apps::add_plan_command(app);
  apps::add_profile_command(app);
  apps::add_trace_command(app);
  apps::add_checkpoint_command(app);
  apps::add_predict_command(app);
  apps::add_bench_command(app);
  apps::add_launch_command(app, apps::split_launch_program(argc, argv));
  if (argc <= 1) {
    std::cout << app.help();
    return apps::kExitOk;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(apps::kExitUsage, e.what(), help_hint(app));
  } catch (const apps::UsageError& e) {
    return fail(apps::kExitUsage, e.what(), help_hint(app));
  } catch (const std::bad_alloc&) {
    return fail(apps::kExitFailure,
                "out of memory (a size in the config or on the command line is too large for "
                "this machine)");
  } catch (const std::filesystem::filesystem_error& e) {
    std::string what = e.code().message();
    if (!e.path2().empty()) what = e.path2().string() + ": " + what;
    if (!e.path1().empty()) what = e.path1().string() + ": " + what;
    return fail(apps::kExitFailure, what);
  } catch (const std::exception& e) {
    return fail(apps::kExitFailure, e.what());
  }
  if (app.get_subcommands().empty()) {  // options but no command
    std::cout << app.help();
  }
  return apps::kExitOk;
}
