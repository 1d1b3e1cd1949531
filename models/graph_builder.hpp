#pragma once

#include <stdexcept>
#include <string>

#include "models/model.hpp"

namespace tandem::models {

// What is wrong with a graph spec, and which node (its index; -1 for the graph as a whole), so
// that a config reader can point at the node's line.
class GraphError : public std::invalid_argument {
 public:
  GraphError(int node, const std::string& what) : std::invalid_argument(what), node_(node) {}
  int node() const { return node_; }

 private:
  int node_;
};

// A graph model from its spec (ModelSpec::name "graph"): each node's layer, sized by shape
// inference from the model input through the nodes before it. Throws GraphError naming the node
// for an unknown layer or input name, a node reading itself or a later node (a cycle), a
// duplicate name, shapes that do not fit, or a node whose output nothing reads.
Model build_graph(const ModelSpec& spec);
// The same graph with the caller's layers (one per node, in order; the nodes' layer fields are
// only their names): custom layers built in code. Checks as build_graph does, and that each
// layer reads as many tensors as its node names.
Model assemble_graph(const ModelSpec& spec, std::vector<std::shared_ptr<const Layer>> layers);

}  // namespace tandem::models
