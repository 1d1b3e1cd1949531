// The UCX plugin's entry point (runtime/plugin.hpp): registers the ucx data plane's factory
// with the transport layer. Called once, by load_plugin("ucx"), under the loader's lock.
#include <memory>
#include <utility>

#include "transport/ucx_channel.hpp"

namespace {

std::unique_ptr<tandem::transport::UcxDataPlane> make(tandem::ActorSystem& system,
                                                      tandem::transport::UcxChannelOptions o) {
  return std::make_unique<tandem::transport::UcxChannel>(system, std::move(o));
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void tandem_plugin_register_v1() {
  tandem::transport::register_ucx_factory(&make);
}
