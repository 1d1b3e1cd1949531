#pragma once
// PipeDream's profile format (msr-fiddle/pipedream, graph/graph.py: a profiler's graph.txt) read
// into a Profile with edges, so its authors' measured graphs plan here
// (`tandem plan --profile graph.txt --format pipedream`, docs/planner.md#planning-on-graphs).
#include <filesystem>
#include <string_view>

#include "planner/profile.hpp"

namespace tandem::planner {

// Node lines "ID -- DESCRIPTION -- forward_compute_time=F, backward_compute_time=B,
// activation_size=A, parameter_size=P[ -- stage_id=S]" (A may be a list "[a; b]", summed as
// graph.py does), then edge lines "\tFROM -- TO" naming declared nodes. As PipeDream's optimizer
// does, source nodes described "Input..." are dropped (their readers read the model input,
// charged nothing) and so are sink nodes described "__getitem__...". The layers come in a
// topological order, ties by node id (numerically where ids end in digits: node2 before
// node10), which is the profiler's execution order. Times (ms) and bytes are per minibatch of
// `minibatch` samples; memory_bytes is the activation, what PipeDream's memory rule stashes.
// Throws std::runtime_error naming "source:line: what" for a malformed line, an edge naming an
// undeclared node or a node itself, a duplicate node or edge, a cycle, a negative or
// non-finite number, or more than 65536 nodes or 1048576 edges.
Profile parse_pipedream_graph(std::string_view text, std::string_view source, int minibatch = 1);
Profile load_pipedream_graph(const std::filesystem::path& path, int minibatch = 1);

}  // namespace tandem::planner
