#include "train/config_overrides.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>
#include <utility>

#include "transport/control_frame.hpp"

namespace tandem::train {
namespace {

// One dotted part of a key: a name, then the list indices after it ("stages[1]").
struct KeyPart {
  std::string name;
  std::vector<std::size_t> indices;
};

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-';
}

// An override being applied: its key and value, and where its errors point.
struct Applying {
  const ConfigOverride& item;
  std::string where;  // "--set train.steps"
  // What the overrides before this one used of the bounds on all values.
  std::size_t bytes_before = 0;
  std::size_t nodes_before = 0;

  [[noreturn]] void fail(const std::string& what, int line = 0, int column = 0) const {
    throw ConfigError(ConfigLocation{where, line, column}, transport::printable(item.key, 256),
                      what);
  }

  std::vector<KeyPart> key_parts() const {
    const std::string& key = item.key;
    if (key.empty()) fail("an override needs a key (KEY=VALUE)");
    std::vector<KeyPart> parts;
    std::size_t i = 0;
    while (true) {
      KeyPart part;
      while (i < key.size() && name_char(key[i])) part.name.push_back(key[i++]);
      if (part.name.empty()) fail("a key is names joined by '.', with [N] after a list's name");
      while (i < key.size() && key[i] == '[') {
        const std::size_t close = key.find(']', i);
        std::size_t index = 0;
        const char* first = key.data() + i + 1;
        const char* last = key.data() + (close == std::string::npos ? key.size() : close);
        const auto [end, ec] = std::from_chars(first, last, index);
        if (close == std::string::npos || ec != std::errc() || end != last || first == last) {
          fail("a list index in a key is a number in brackets, as in pipeline.stages[1]");
        }
        part.indices.push_back(index);
        i = close + 1;
      }
      parts.push_back(std::move(part));
      if (i == key.size()) return parts;
      if (key[i] != '.') fail("a key is names joined by '.', with [N] after a list's name");
      ++i;
    }
  }

  YAML::Node value() const {
    if (bytes_before + item.value.size() > kMaxOverrideValueBytes) {
      fail("the value is " + std::to_string(item.value.size()) + " bytes; at most " +
           std::to_string(kMaxOverrideValueBytes) + " in all values (" +
           std::to_string(bytes_before) + " before it)");
    }
    try {
      return YAML::Load(item.value);
    } catch (const YAML::Exception& e) {
      fail("YAML syntax error in the value: " + e.msg, e.mark.line + 1, e.mark.column + 1);
    }
  }

  // Every node of `value` (keys included), within kMaxOverrideNodes with those before: an
  // alias-laden value could otherwise name a number of nodes exponential in its size.
  std::vector<YAML::Node> nodes_of(const YAML::Node& value) const {
    std::vector<YAML::Node> out;
    std::vector<YAML::Node> stack{value};
    while (!stack.empty()) {
      YAML::Node n = stack.back();
      stack.pop_back();
      if (nodes_before + out.size() == kMaxOverrideNodes) {
        fail("the values hold more than " + std::to_string(kMaxOverrideNodes) + " YAML nodes");
      }
      out.push_back(n);
      if (n.IsMap()) {
        for (const auto& kv : n) {
          stack.push_back(kv.first);
          stack.push_back(kv.second);
        }
      } else if (n.IsSequence()) {
        for (const auto& element : n) stack.push_back(element);
      }
    }
    return out;
  }
};

std::string describe(const YAML::Node& n) {
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  if (n.IsNull()) return "empty";
  std::string quoted = "'";
  quoted += transport::printable(n.Scalar());
  quoted += '\'';
  return quoted;
}

// The value of `name` in `map`, compared as text; an undefined node when it has none.
YAML::Node child(const YAML::Node& map, const std::string& name) {
  for (const auto& kv : map) {
    if (kv.first.IsScalar() && kv.first.Scalar() == name) return kv.second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

// Sets `map`'s `name` to `value` (a new entry, so an alias of the old value elsewhere keeps it),
// recording the key's node with the override's.
void set_entry(YAML::Node& map, const std::string& name, const YAML::Node& value,
               std::vector<YAML::Node>& nodes) {
  if (child(map, name).IsDefined()) map.remove(name);
  map[name] = value;
  for (const auto& kv : map) {
    if (kv.first.IsScalar() && kv.first.Scalar() == name) nodes.push_back(kv.first);
  }
}

// Applies one override; returns the YAML nodes its value holds.
std::size_t apply_one(YAML::Node& root, const Applying& a, ConfigOrigin& origin) {
  const std::vector<KeyPart> parts = a.key_parts();
  const YAML::Node value = a.value();
  std::vector<YAML::Node> nodes = a.nodes_of(value);
  const std::size_t value_nodes = nodes.size();
  YAML::Node at;
  at.reset(root);
  std::string path;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const KeyPart& part = parts[p];
    const bool last = p + 1 == parts.size();
    if (at.IsNull()) at = YAML::Node(YAML::NodeType::Map);  // "cluster:" with nothing under it
    if (!at.IsMap()) {
      a.fail((path.empty() ? std::string("the config") : path) + " is " + describe(at) +
             ", not a mapping of keys");
    }
    if (!path.empty()) path += '.';
    path += part.name;
    if (last && part.indices.empty()) {
      set_entry(at, part.name, value, nodes);
      break;
    }
    YAML::Node next = child(at, part.name);
    if (!next.IsDefined()) {
      if (!part.indices.empty()) a.fail(path + " is not in the config: there is no list to index");
      next = YAML::Node(YAML::NodeType::Map);
      nodes.push_back(next);
      set_entry(at, part.name, next, nodes);
    }
    for (std::size_t k = 0; k < part.indices.size(); ++k) {
      const std::size_t index = part.indices[k];
      if (!next.IsSequence()) a.fail(path + " is " + describe(next) + ", not a list");
      if (index >= next.size()) {
        a.fail(path + " has " + std::to_string(next.size()) + " items; index " +
               std::to_string(index) + " is past its end");
      }
      path += '[';
      path += std::to_string(index);
      path += ']';
      if (last && k + 1 == part.indices.size()) {
        next[index] = value;
        origin.add_override(std::move(nodes), a.where);
        return value_nodes;
      }
      YAML::Node item = next[index];
      next.reset(item);
    }
    at.reset(next);
  }
  origin.add_override(std::move(nodes), a.where);
  return value_nodes;
}

}  // namespace

ConfigOverride parse_override(const std::string& text, const std::string& label) {
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos) {
    throw ConfigError(ConfigLocation{label + " " + transport::printable(text, 256)}, "",
                      "expected KEY=VALUE, as in train.steps=200");
  }
  return ConfigOverride{text.substr(0, eq), text.substr(eq + 1)};
}

void apply_overrides(YAML::Node& root, const ConfigOverrides& overrides, ConfigOrigin& origin) {
  if (overrides.items.size() > kMaxOverrides) {
    throw ConfigError(ConfigLocation{overrides.label}, "",
                      std::to_string(overrides.items.size()) + " overrides; at most " +
                          std::to_string(kMaxOverrides));
  }
  if (!overrides.items.empty() && root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  std::set<std::string> given;
  std::size_t bytes = 0, nodes = 0;
  for (const ConfigOverride& item : overrides.items) {
    const Applying a{
        item, overrides.label + " " + transport::printable(item.key, kMaxOverrideKeyBytes + 3),
        bytes, nodes};
    if (item.key.size() > kMaxOverrideKeyBytes) {
      a.fail("the key is " + std::to_string(item.key.size()) + " bytes; at most " +
             std::to_string(kMaxOverrideKeyBytes));
    }
    if (!given.insert(item.key).second) a.fail("given twice: give each key once");
    nodes += apply_one(root, a, origin);
    bytes += item.value.size();
  }
}

}  // namespace tandem::train
