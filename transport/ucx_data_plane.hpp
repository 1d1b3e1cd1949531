#pragma once
// The `ucx` data plane as the core reaches it: its options, its peers and the channel's
// interface (UcxDataPlane). The channel itself, transport/ucx_channel.hpp, links libucp and
// libucs and is built into a plugin, libtandem_ucx.so (runtime/plugin.hpp), which the core
// loads the first time a job asks for the ucx data plane (make_ucx_channel): a program that
// never does maps no UCX library. Tests and benches that need the concrete channel link the
// plugin directly.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/actor_system.hpp"
#include "transport/job_proof.hpp"
#include "transport/routed_channel.hpp"
#include "transport/wire_message.hpp"

namespace tandem::transport {

inline constexpr std::uint16_t kUcxAmId = 0x7d;
inline constexpr std::uint32_t kUcxHeaderMagic = 0x58554454;  // "TDUX" on the wire
inline constexpr std::size_t kUcxHeaderBytes = 16;

struct UcxPeer {
  int rank = 0;                    // the peer process, numbered as the rendezvous numbers ranks
  std::string host;                // for messages only: UCX finds the peer through its address
  std::vector<std::byte> address;  // its UcxChannel::worker_address()
};

struct UcxChannelOptions {
  // What every peer proves it holds (the rendezvous hands them out): both ends must hold the
  // same. Frames carry job_id_of(credentials.job).
  JobCredentials credentials;
  int rank = 0;                                             // this process
  WireTypes types;                                          // the message types that may travel
  std::uint64_t max_data_bytes = kDefaultMaxWireDataBytes;  // per message, both ways
  // UCX transports for this channel's context (UCX_TLS syntax, e.g. "tcp" or "sm,self");
  // empty: the environment's UCX_TLS, or UCX's choice.
  std::string transports;
  // The network devices UCX may use for this channel's context, and so the interfaces its
  // transports listen on (UCX_NET_DEVICES syntax, e.g. "eth0", "mlx5_0:1" or "lo"). Empty: the
  // environment's UCX_NET_DEVICES, else UCX's default, which is every device it finds: the
  // worker then accepts connections on every interface of the host.
  std::string net_devices;
  // Messages (header and tensors) from this many bytes on go by rendezvous, received straight
  // into their tensors; smaller ones go eagerly and are copied once out of UCX's buffer. UCX's
  // own threshold for active messages sent even 16 KiB tensors by rendezvous, whose extra round
  // trips cost them 4x in bandwidth over TCP (docs/transport.md). 0: UCX's choice. The
  // environment's UCX_RNDV_THRESH, where set, wins.
  std::size_t rendezvous_min_bytes = std::size_t{256} << 10;
  // Rendezvous of up to this many payload bytes start only while the peer's receives in flight
  // leave room for them (one always may); later ones wait (UCX keeps their descriptors) and get
  // their tensors when an earlier one completes. Allocating on arrival put every message of a
  // 32-deep stream into its own block, so the kernel's copy wrote cold memory all the time; a
  // few at a time cycle through blocks the caching allocator hands back still in cache. Larger
  // messages start at once: held back, a 16 MiB shared-memory receive fell from 21 to 5-9 GB/s
  // in some runs (docs/benchmarks.md's history). 0: no bound.
  std::size_t rendezvous_receive_bytes = std::size_t{4} << 20;
  // From start(): how long a peer may take to say hello and prove itself (it may start later),
  // the two summed.
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds hello_timeout{10000};
  // After close() sent this process's goodbyes: how long it waits for the peers' goodbyes, so
  // that closing does not look like a failure to a peer that is still sending.
  std::chrono::milliseconds close_linger{1000};
  // Called on the progress thread for every failure (keep it short; it may stop the system),
  // and for the first 100 strangers (the rest are counted in stats().strangers only).
  std::function<void(const ChannelError&)> on_error;
  bool stop_system_on_error = true;
  // How device tensors reach host memory before they travel; null: the cuda ones, on a copy
  // stream per device (send_staging.hpp).
  std::shared_ptr<SendStaging> staging;
};

struct UcxChannelStats : ChannelStats {
  std::uint64_t rendezvous_received = 0;  // payloads UCX delivered by rendezvous
  std::uint64_t rendezvous_waited = 0;    // of those, started only once earlier ones completed
};

// What a job's process group needs of the ucx data plane (transport/ucx_channel.hpp says what
// each does).
class UcxDataPlane : public RoutedChannel {
 public:
  using RoutedChannel::RoutedChannel;
  // This worker's address: what peers need in UcxPeer::address.
  virtual const std::vector<std::byte>& worker_address() const = 0;
  // Before start(), not thread-safe: a peer process.
  virtual void add_peer(UcxPeer peer) = 0;
  // Starts the progress thread, which connects to every peer.
  virtual void start() = 0;
  // Orderly end; idempotent.
  virtual void close(std::chrono::milliseconds timeout = std::chrono::seconds(10)) = 0;
  virtual UcxChannelStats stats() const = 0;
};

// Whether the ucx data plane can be had: loads the plugin on the first call.
bool ucx_available();

// A UcxChannel, from the plugin (loaded on the first call). Throws std::runtime_error saying
// why when the plugin is not installed or cannot be loaded, and what UcxChannel's constructor
// throws.
std::unique_ptr<UcxDataPlane> make_ucx_channel(ActorSystem& system, UcxChannelOptions options);

// The plugin's entry point registers its factory here.
using UcxFactory = std::unique_ptr<UcxDataPlane> (*)(ActorSystem&, UcxChannelOptions);
void register_ucx_factory(UcxFactory factory);

}  // namespace tandem::transport
