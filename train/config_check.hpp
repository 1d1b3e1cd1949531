#pragma once
// What follows the reading of a config (train/config.hpp): the reader only reads, and this step
// plans what the config leaves to the planner (`partition: auto`, train/partition_choice.hpp;
// `schedule: auto`, train/schedule_choice.hpp), then checks the job as any job is checked: the
// stages' devices against the machine, slices and chunks against the stages, the schedule's own
// rules, and the run against the machine's memory (train/memory_check.hpp). It builds the model
// once, for everything after (Config::model_built). A failure is a ConfigError at the line of
// the key at fault.
#include "train/config.hpp"
#include "train/config_limits.hpp"

namespace tandem::train {

void check_config(Config& config, const Machine& machine);

}  // namespace tandem::train
