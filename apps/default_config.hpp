#pragma once
// The config `tandem train` runs when given none: a 4-stage pipeline that visibly learns within
// about a minute on two cores. configs/default.yaml ships the same text so that it can be read,
// copied and edited; a test keeps the two identical.
#include <string_view>

namespace tandem::apps {

// The name errors and the summary give the embedded config.
inline constexpr const char* kDefaultConfigName = "default.yaml (embedded; configs/default.yaml)";

std::string_view default_config();

}  // namespace tandem::apps
