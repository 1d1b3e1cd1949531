#include <cstdio>
#include <exception>

#include "apps/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tandem: pipeline-parallel DNN training runtime"};
  app.require_subcommand(0, 1);
  tandem::apps::add_demo_command(app);
  tandem::apps::add_devices_command(app);
  tandem::apps::add_simulate_command(app);
  tandem::apps::add_train_command(app);
  tandem::apps::add_plan_command(app);
  tandem::apps::add_profile_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
