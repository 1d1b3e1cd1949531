// A plugin for plugin_test.cpp: its entry point leaves a mark the test can see without any
// registry of the core (an environment variable of the process).
#include <cstdlib>

extern "C" __attribute__((visibility("default"))) void tandem_plugin_register_v1() {
  ::setenv("TANDEM_TEST_PLUGIN_REGISTERED", "1", 1);
}
