#pragma once
// The first thing that ended a multi-process job's run on this rank, as its process group saw
// it: which kind of failure and which rank it names, for callers that report failures by kind
// (the embedding API's error codes) rather than by the words of the message.
#include <string>

namespace tandem::train {

struct GroupFailure {
  enum class Kind {
    none,         // nothing failed
    lost,         // a rank left without goodbye, went silent, or its data-plane connection broke
    stalled,      // a rank held work and completed none for the stall timeout
    collectives,  // a reduction across processes failed without a rank named lost first
  };
  Kind kind = Kind::none;
  int rank = -1;     // the rank named; -1 when none is
  std::string text;  // the words the run failed with ("lost rank 1 (10.0.0.2): ...")
};

}  // namespace tandem::train
