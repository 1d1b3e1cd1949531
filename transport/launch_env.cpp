#include "transport/launch_env.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio/ip/address.hpp>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <system_error>

#include "runtime/log.hpp"

namespace tandem::transport {
namespace {

// The variable names of one launcher's convention.
struct Convention {
  LaunchSource source;
  const char* rank;
  const char* world;
  const char* local_rank;
};

constexpr Convention kTandem{LaunchSource::kTandem, "TANDEM_RANK", "TANDEM_WORLD_SIZE",
                             "TANDEM_LOCAL_RANK"};
constexpr Convention kTorchrun{LaunchSource::kTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK"};
constexpr Convention kOpenMpi{LaunchSource::kOpenMpi, "OMPI_COMM_WORLD_RANK",
                              "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"};
constexpr Convention kSlurm{LaunchSource::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"};

[[noreturn]] void fail(const std::string& message) {
  throw LaunchEnvError(message);
}

std::string quoted(std::string_view name, std::string_view value) {
  return std::string(name) + "='" + std::string(value) + "'";
}

// A non-negative decimal integer no larger than `max`, nothing else (no sign, no spaces).
long parse_number(std::string_view name, std::string_view value, long max) {
  long v = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || ptr != end || v < 0) {
    fail(quoted(name, value) + " is not a non-negative integer");
  }
  if (v > max) fail(quoted(name, value) + " is larger than " + std::to_string(max));
  return v;
}

std::uint16_t parse_port(std::string_view name, std::string_view value) {
  const long port = parse_number(name, value, 65535);
  if (port == 0) fail(quoted(name, value) + ": port 0 cannot be reached by the other ranks");
  return static_cast<std::uint16_t>(port);
}

void read_master(const EnvLookup& lookup, LaunchEnv& env) {
  if (const auto master = lookup("TANDEM_MASTER")) {
    const std::string& m = *master;
    std::string host;
    std::string port;
    if (!m.empty() && m.front() == '[') {  // [v6-address]:port
      const auto close = m.find(']');
      if (close == std::string::npos || close + 1 >= m.size() || m[close + 1] != ':') {
        fail(quoted("TANDEM_MASTER", m) + " is not host:port or [address]:port");
      }
      host = m.substr(1, close - 1);
      port = m.substr(close + 2);
    } else {
      const auto colon = m.rfind(':');
      if (colon == std::string::npos || m.find(':') != colon) {
        fail(quoted("TANDEM_MASTER", m) + " is not host:port or [address]:port");
      }
      host = m.substr(0, colon);
      port = m.substr(colon + 1);
    }
    if (host.empty()) fail(quoted("TANDEM_MASTER", m) + " names no host");
    env.master_host = host;
    env.master_port = parse_port("TANDEM_MASTER", port);
    return;
  }
  const auto addr = lookup("MASTER_ADDR");
  const auto port = lookup("MASTER_PORT");
  if (addr && !port) fail(quoted("MASTER_ADDR", *addr) + " is set but MASTER_PORT is not");
  if (port && !addr) fail(quoted("MASTER_PORT", *port) + " is set but MASTER_ADDR is not");
  if (!addr) return;
  if (addr->empty()) fail("MASTER_ADDR is set but empty");
  env.master_host = *addr;
  env.master_port = parse_port("MASTER_PORT", *port);
}

// The file's bytes, refused unless it is a regular file of at most kMaxJobTokenBytes (opened
// without blocking, so that a FIFO is refused rather than waited on).
std::string read_token_file(const std::string& path) {
  const std::string where = quoted("TANDEM_JOB_TOKEN_FILE", path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(where + ": cannot open the file: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(where + ": not a regular file (a token file holds the job's token)");
  }
  // As ssh treats a private key: a secret others may read is no longer the job's alone.
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    tandem::log::warn(
        "{}: the file is readable or writable by others (mode {:o}); the job's "
        "token should be the owner's alone: chmod 600 it",
        where, st.st_mode & 0777);
  }
  // One byte past the bound tells a file that grew since fstat from one that fits.
  std::string bytes(kMaxJobTokenBytes + 1, '\0');
  std::size_t got = 0;
  bool too_large = static_cast<std::uintmax_t>(st.st_size) > kMaxJobTokenBytes;
  while (!too_large && got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      fail(where + ": cannot read the file: " + std::strerror(error));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  too_large = too_large || got > kMaxJobTokenBytes;
  if (too_large) {
    fail(where + ": the file is larger than " + std::to_string(kMaxJobTokenBytes) +
         " bytes; a token file holds one token");
  }
  bytes.resize(got);
  return bytes;
}

// Unset or "0": a token is required where the job may span hosts; "1": it is not.
bool allows_no_token(const EnvLookup& lookup) {
  const auto allow = lookup("TANDEM_ALLOW_NO_TOKEN");
  if (!allow || *allow == "0") return false;
  if (*allow == "1") return true;
  fail(quoted("TANDEM_ALLOW_NO_TOKEN", *allow) + " is not 0 or 1");
}

void require_token_across_hosts(const EnvLookup& lookup, const LaunchEnv& env) {
  const bool allowed = allows_no_token(lookup);
  if (env.world_size <= 1 || !env.job_token.empty() || allowed) return;
  if (is_loopback_host(env.master_host)) return;
  fail(std::string(to_string(env.source)) + " launch of " + std::to_string(env.world_size) +
       " processes with master '" + env.master_host +
       "' may span hosts but has no job token, so anyone who reaches the master could join "
       "it: set TANDEM_JOB_TOKEN (e.g. export TANDEM_JOB_TOKEN=$(openssl rand -hex 32)) or "
       "TANDEM_JOB_TOKEN_FILE, the same on every rank, or TANDEM_ALLOW_NO_TOKEN=1 on a trusted "
       "network");
}

}  // namespace

std::string_view to_string(LaunchSource source) {
  switch (source) {
    case LaunchSource::kSingle:
      return "single process";
    case LaunchSource::kTandem:
      return "tandem";
    case LaunchSource::kTorchrun:
      return "torchrun";
    case LaunchSource::kOpenMpi:
      return "Open MPI";
    case LaunchSource::kSlurm:
      return "Slurm";
  }
  return "unknown";
}

std::string LaunchEnv::describe() const {
  std::string s = "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (" +
                  std::string(to_string(source)) + ", local rank " + std::to_string(local_rank) +
                  ")";
  if (!master_host.empty()) {
    const bool v6 = master_host.find(':') != std::string::npos;
    s += ", master " + (v6 ? "[" + master_host + "]" : master_host) + ":" +
         std::to_string(master_port);
  }
  return s;
}

EnvLookup process_env() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

LaunchEnv read_launch_env(const EnvLookup& lookup) {
  LaunchEnv env;
  const Convention* convention = nullptr;
  for (const Convention* c : {&kTandem, &kTorchrun, &kOpenMpi, &kSlurm}) {
    if (lookup(c->rank) || lookup(c->world)) {
      convention = c;
      break;
    }
  }
  if (convention != nullptr) {
    const Convention& c = *convention;
    const auto rank = lookup(c.rank);
    const auto world = lookup(c.world);
    if (!rank) fail(quoted(c.world, *world) + " is set but " + c.rank + " is not");
    if (!world) fail(quoted(c.rank, *rank) + " is set but " + c.world + " is not");
    constexpr long kMax = std::numeric_limits<int>::max();
    env.source = c.source;
    env.world_size = static_cast<int>(parse_number(c.world, *world, kMax));
    if (env.world_size == 0) fail(quoted(c.world, *world) + ": a job needs at least one process");
    env.rank = static_cast<int>(parse_number(c.rank, *rank, kMax));
    if (env.rank >= env.world_size) {
      fail(quoted(c.rank, *rank) + " is not below " + quoted(c.world, *world));
    }
    if (const auto local = lookup(c.local_rank)) {
      env.local_rank = static_cast<int>(parse_number(c.local_rank, *local, kMax));
      if (env.local_rank >= env.world_size) {
        fail(quoted(c.local_rank, *local) + " is not below " + quoted(c.world, *world));
      }
    }
  }
  read_master(lookup, env);
  if (env.world_size > 1 && env.master_host.empty()) {
    fail(std::string(to_string(env.source)) + " launch of " + std::to_string(env.world_size) +
         " processes names no master: set TANDEM_MASTER=host:port (or MASTER_ADDR and "
         "MASTER_PORT)");
  }
  env.job_token = read_job_token(lookup);
  require_token_across_hosts(lookup, env);
  return env;
}

std::string read_job_token(const EnvLookup& lookup) {
  const auto token = lookup("TANDEM_JOB_TOKEN");
  const auto file = lookup("TANDEM_JOB_TOKEN_FILE");
  if (token && file) {
    fail("both TANDEM_JOB_TOKEN and " + quoted("TANDEM_JOB_TOKEN_FILE", *file) +
         " are set; set one");
  }
  if (token) {
    if (token->empty()) fail("TANDEM_JOB_TOKEN is set but empty");
    if (token->size() > kMaxJobTokenBytes) {
      fail("TANDEM_JOB_TOKEN is longer than " + std::to_string(kMaxJobTokenBytes) + " bytes");
    }
    std::string t = token_text(*token);
    if (t.empty()) fail("TANDEM_JOB_TOKEN holds only white space");
    return t;
  }
  if (!file) return {};
  std::string t = token_text(read_token_file(*file));
  if (t.empty()) {
    fail(quoted("TANDEM_JOB_TOKEN_FILE", *file) + ": the file is empty (holds no token)");
  }
  return t;
}

std::string token_text(std::string raw) {
  while (!raw.empty() &&
         (raw.back() == '\n' || raw.back() == '\r' || raw.back() == ' ' || raw.back() == '\t')) {
    raw.pop_back();
  }
  return raw;
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost") return true;
  std::error_code ec;
  const asio::ip::address address = asio::ip::make_address(std::string(host), ec);
  if (ec) return false;
  if (address.is_loopback()) return true;
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6()).is_loopback();
  }
  return false;
}

}  // namespace tandem::transport
