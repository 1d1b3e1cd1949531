// A shared library that is not a Tandem plugin: it has no tandem_plugin_register_v1.
extern "C" __attribute__((visibility("default"))) int not_a_tandem_entry() {
  return 7;
}
