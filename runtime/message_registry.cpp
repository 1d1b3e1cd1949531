#include "runtime/message_registry.hpp"

#include <fmt/format.h>

#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace tandem {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<std::uint32_t, std::string_view> names;
  std::deque<std::string> storage;  // stable addresses for names that are not literals
  std::unordered_map<std::uint32_t, std::string> unknown;  // node-based: stable addresses
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_message_type(std::uint32_t id, std::string_view name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.names.find(id);
  if (it != r.names.end()) {
    if (it->second != name) {
      throw std::logic_error(
          fmt::format("message types '{}' and '{}' share the id {:#x}", it->second, name, id));
    }
    return;
  }
  r.storage.emplace_back(name);
  r.names.emplace(id, r.storage.back());
}

std::string_view message_type_name(std::uint32_t id) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.names.find(id);
  if (it != r.names.end()) return it->second;
  // Remembered apart from the real names, so a later registration of `id` still works and
  // asking again does not grow the storage.
  auto [unknown, added] = r.unknown.try_emplace(id);
  if (added) unknown->second = fmt::format("<unknown type {:#x}>", id);
  return unknown->second;
}

}  // namespace tandem
