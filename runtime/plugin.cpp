#include "runtime/plugin.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "runtime/log.hpp"

namespace tandem {
namespace {

struct PluginRecord {
  bool loaded = false;
  std::string problem;
};

struct Plugins {
  std::mutex mu;
  std::map<std::string, PluginRecord, std::less<>> by_name;
};

Plugins& plugins() {
  static Plugins* p = new Plugins();  // never destroyed: a plugin stays loaded to the end
  return *p;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Plugin names are the project's own ("cuda"): letters, digits and '_' only, so a name can
// never walk out of the plugin folder.
bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

PluginRecord open_plugin(std::string_view name) {
  PluginRecord r;
  if (!valid_name(name)) {
    r.problem = "invalid plugin name '" + std::string(name) + "'";
    return r;
  }
  const std::string path = plugin_dir() + "/libtandem_" + std::string(name) + ".so";
  if (!file_exists(path)) {
    r.problem = "not installed: " + path;
    return r;
  }
  // RTLD_NOW: a plugin built against another core fails here, with the missing symbol named,
  // not in the middle of a run.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    r.problem = why != nullptr ? why : "dlopen failed: " + path;
  } else if (void* entry = ::dlsym(handle, "tandem_plugin_register_v1"); entry == nullptr) {
    r.problem = path +
                " has no entry point tandem_plugin_register_v1 (not a Tandem plugin, or "
                "one of another version)";
  } else {
    reinterpret_cast<void (*)()>(entry)();
    r.loaded = true;
    return r;
  }
  log::warn("the {} back end is unavailable: {}", name, r.problem);
  return r;
}

}  // namespace

bool load_plugin(std::string_view name) {
  Plugins& p = plugins();
  std::lock_guard lock(p.mu);
  auto it = p.by_name.find(name);
  if (it == p.by_name.end()) it = p.by_name.emplace(std::string(name), open_plugin(name)).first;
  return it->second.loaded;
}

bool plugin_loaded(std::string_view name) {
  Plugins& p = plugins();
  std::lock_guard lock(p.mu);
  const auto it = p.by_name.find(name);
  return it != p.by_name.end() && it->second.loaded;
}

std::string plugin_problem(std::string_view name) {
  Plugins& p = plugins();
  std::lock_guard lock(p.mu);
  const auto it = p.by_name.find(name);
  return it == p.by_name.end() ? std::string() : it->second.problem;
}

std::string plugin_dir() {
  if (const char* dir = std::getenv("TANDEM_PLUGIN_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&plugin_dir), &info) == 0 || info.dli_fname == nullptr) {
    return ".";
  }
  std::string lib = info.dli_fname;
  const auto slash = lib.rfind('/');
  return slash == std::string::npos ? "." : lib.substr(0, slash);
}

}  // namespace tandem
