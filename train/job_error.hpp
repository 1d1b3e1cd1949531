#pragma once
// A job that cannot run as specified, named by the key of the JobSpec field at fault in the
// config's own dotted form ("data", "train.optimizer", "pipeline.stages[2].device"), so a
// front end can point at it: the CLI at the YAML line, the API at the field.
#include <stdexcept>
#include <string>

namespace tandem::train {

class JobError : public std::invalid_argument {
 public:
  JobError(std::string key, const std::string& what);

  const std::string& key() const { return key_; }
  // The message without the "key: " prefix what() carries.
  const std::string& detail() const { return detail_; }

 private:
  std::string key_;
  std::string detail_;
};

}  // namespace tandem::train
