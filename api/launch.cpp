#include "api/launch.hpp"

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

Launch Launch::from_environment() {
  Launch l;
  l.kind_ = Kind::environment;
  return l;
}

Launch Launch::rank(int rank, int world_size, std::string master, std::string token) {
  Launch l;
  l.kind_ = Kind::rank;
  l.rank_ = rank;
  l.world_size_ = world_size;
  l.master_ = std::move(master);
  l.token_ = std::move(token);
  return l;
}

namespace api {

std::unique_ptr<train::ProcessGroup> join_job(const Launch& launch,
                                              train::ProcessGroupOptions options,
                                              const char* owner) {
  const std::string field = std::string(owner) + ".launch";
  if (launch.kind() == Launch::Kind::local) return nullptr;
  if (launch.kind() == Launch::Kind::environment) {
    try {
      return train::join_launched_job(std::move(options));
    } catch (const transport::LaunchEnvError& e) {
      throw std::invalid_argument(field + " (from the environment): " + e.what());
    }
  }
  if (launch.world_size() < 1 || launch.rank_index() < 0 ||
      launch.rank_index() >= launch.world_size()) {
    throw std::invalid_argument(field + ": rank " + std::to_string(launch.rank_index()) + " of " +
                                std::to_string(launch.world_size()) +
                                " processes (a rank is 0 to world_size - 1)");
  }
  // The launcher variables' own checks (the master's form, a token where the master may be
  // remote), read from these values instead of the environment.
  const std::map<std::string, std::string, std::less<>> vars = {
      {"TANDEM_RANK", std::to_string(launch.rank_index())},
      {"TANDEM_WORLD_SIZE", std::to_string(launch.world_size())},
      {"TANDEM_MASTER", launch.master()},
      {"TANDEM_JOB_TOKEN", launch.token()},
  };
  const auto lookup = [&vars](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
  try {
    return train::join_launched_job(std::move(options), lookup);
  } catch (const transport::LaunchEnvError& e) {
    throw std::invalid_argument(field + ": " + e.what());
  }
}

}  // namespace api
}  // namespace tandem
