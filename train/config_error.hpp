#pragma once
// Every config problem is reported as "file:line:column: key: what", so the user finds the
// spot in an editor without reading the parser.
#include <stdexcept>
#include <string>

namespace tandem::train {

struct ConfigLocation {
  std::string file;
  int line = 0;             // 1-based; 0 when unknown
  int column = 0;           // 1-based; 0 when unknown
  std::string str() const;  // "file:line:column", "file" when the line is unknown
};

class ConfigError : public std::runtime_error {
 public:
  // `key` is the full dotted path ("train.optimizer.lr"); empty for the whole file.
  ConfigError(ConfigLocation where, std::string key, const std::string& what);

  const ConfigLocation& where() const { return where_; }
  const std::string& key() const { return key_; }

 private:
  ConfigLocation where_;
  std::string key_;
};

}  // namespace tandem::train
