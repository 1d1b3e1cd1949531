#pragma once
// Who this process is in a multi-process job, read from the environment the launcher set:
// Tandem's own variables, torchrun's, Open MPI's or Slurm's, so that the launchers clusters
// already run start Tandem unchanged (docs/transport.md has the table).
//
// Precedence, first match wins: TANDEM_RANK, then torchrun (RANK/WORLD_SIZE), then Open MPI
// (OMPI_COMM_WORLD_RANK), then Slurm (SLURM_PROCID), else a single process. The more specific
// launcher wins because launchers nest: torchrun started by srun or mpirun sees the outer
// launcher's variables too, but its own RANK is the one that names this process.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem::transport {

enum class LaunchSource { kSingle, kTandem, kTorchrun, kOpenMpi, kSlurm };

std::string_view to_string(LaunchSource source);

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;       // the rank among the processes of this host (picks a GPU)
  std::string master_host;  // where rank 0's control plane listens
  std::uint16_t master_port = 0;
  LaunchSource source = LaunchSource::kSingle;
  std::string job_token;  // empty: none given

  // "rank 2 of 4 (torchrun), master 10.0.0.1:29500" for logs.
  std::string describe() const;
};

// A variable that is missing, malformed or inconsistent; the message names it and its value.
class LaunchEnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Returns the value of an environment variable, or nothing when it is unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// std::getenv.
EnvLookup process_env();

// The largest job token, in the variable or in the file: a token is a secret of some dozens of
// bytes, and the bound keeps a file such as /dev/zero from being read without end.
inline constexpr std::size_t kMaxJobTokenBytes = 4096;

// Reads the launch environment through `lookup` (tests pass a map). The master address is
// required when the world has more than one process; TANDEM_MASTER ("host:port", "[v6]:port")
// wins over MASTER_ADDR/MASTER_PORT under every launcher. The job token is read_job_token's.
//
// A job of several processes whose master is not a loopback address may span hosts, where
// anyone who reaches the master's port could join it: such a job needs a token, unless
// TANDEM_ALLOW_NO_TOKEN=1 says the network is trusted. A loopback master ("localhost",
// 127.0.0.0/8, ::1) keeps the job on one host and needs none.
LaunchEnv read_launch_env(const EnvLookup& lookup);

// The job token from TANDEM_JOB_TOKEN, or from the file TANDEM_JOB_TOKEN_FILE names (a regular
// file of at most kMaxJobTokenBytes, warned about when others may read or write it); empty when
// neither is set. Either way its trailing white space is stripped (token_text), so one secret
// given one way to one rank and the other way to another is one token. Setting both is an
// error, so that the one in effect is never a guess.
std::string read_job_token(const EnvLookup& lookup);

// A token as given, without its trailing white space (newlines, carriage returns, spaces, tabs).
std::string token_text(std::string raw);

// Whether `host` names this machine's loopback interface, read as written (no name lookup):
// "localhost", an IPv4 address in 127.0.0.0/8, "::1" or an IPv4-mapped 127.x address.
bool is_loopback_host(std::string_view host);

}  // namespace tandem::transport
