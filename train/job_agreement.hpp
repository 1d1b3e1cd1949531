#pragma once
// What the ranks of a multi-process job must agree on before any of them trains, and the check
// that they do: a rank started with another config, plan or model (a stale binary, an edited
// file on one host) is refused at the start with the first line that differs, instead of
// failing later as a lost rank or a connection reset.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "train/job_agreement_text.hpp"
#include "train/job_spec.hpp"
#include "train/session.hpp"

namespace tandem::train {

class ProcessGroup;

// One "key: value" line per thing the ranks must share: the model (every layer's line), the
// plan (schedule, stages, replicas, slices, chunks) and the training (minibatch, steps,
// accumulation, optimizer, seed, clipping, precision). Keys are the config's.
std::vector<std::string> job_description(const JobSpec& job, const Session& session);

// What a process joining a running elastic job (train/elastic_door.hpp) must share with it,
// whatever a re-plan makes of the pipeline: the model, the training (`steps`: the run's length,
// an override included) and the checkpoint interval given (`checkpoint_every`, before any
// rounding), since the job takes joiners in at its checkpoints and every rank must stop at the
// same steps.
std::vector<std::string> joiner_description(const JobSpec& job, const models::Model& model,
                                            std::int64_t steps, std::int64_t checkpoint_every);

// Rank 0 sends its description under `key`; every other rank compares it with its own and
// answers. A rank that differs throws JobError naming the first differing line's key, both
// values and rank 0; rank 0 throws the same naming the first rank that differs. Every rank
// calls it, with the same key, before its first segment.
void agree_on_job(ProcessGroup& group, const std::vector<std::string>& mine,
                  const std::string& key);

}  // namespace tandem::train
