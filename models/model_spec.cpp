#include "models/model_spec.hpp"

#include <sstream>

namespace tandem::models {

std::string ModelSpec::describe() const {
  std::ostringstream s;
  s << name << "(";
  if (name == "mlp") {
    s << "widths=";
    for (std::size_t i = 0; i < widths.size(); ++i) s << (i ? "-" : "") << widths[i];
  } else if (name == "gpt") {
    s << "layers=" << layers << ", d_model=" << d_model << ", heads=" << heads
      << ", seq_len=" << seq_len << ", vocab=" << vocab
      << ", d_ff=" << (d_ff > 0 ? d_ff : 4 * d_model);
    if (tie_embeddings) s << ", tie_embeddings";
  } else if (name == "gnmt") {
    s << "layers=" << layers << ", d_model=" << d_model << ", vocab=" << vocab
      << ", seq_len=" << seq_len;
  } else if (name == "s2vt") {
    s << "d_model=" << d_model << ", vocab=" << vocab << ", seq_len=" << seq_len
      << ", frames=" << frames << ", frame_features=" << frame_features;
  } else if (is_image_model(name)) {
    s << "width_mult=" << width_mult << ", in_channels=" << in_channels
      << ", image_size=" << image_size << ", classes=" << classes;
  } else if (name == "graph") {
    // Every node with its kind, size and inputs: two graphs that differ anywhere describe
    // differently (a checkpoint compares descriptions).
    if (graph.inputs.empty()) {
      s << graph.input_name << "=[";
      for (std::size_t i = 0; i < graph.input_shape.size(); ++i) {
        s << (i ? "," : "") << graph.input_shape[i];
      }
      s << "]";
    }
    for (std::size_t k = 0; k < graph.inputs.size(); ++k) {
      const GraphInput& in = graph.inputs[k];
      s << (k ? "; " : "") << in.name << "=" << in.dtype << "[";
      for (std::size_t i = 0; i < in.shape.size(); ++i) s << (i ? "," : "") << in.shape[i];
      s << "]";
    }
    for (const GraphNode& n : graph.nodes) {
      s << "; " << n.name << "=" << n.layer;
      if (n.layer == "linear") s << ":" << n.out << ":" << n.activation;
      if (n.layer == "dropout") s << ":" << n.p;
      if (n.layer == "embedding") s << ":" << n.vocab << ":" << n.out;
      if (n.layer == "concat" && n.axis != -1) s << ":axis" << n.axis;
      if (n.layer == "conv2d" || n.layer == "max_pool" || n.layer == "avg_pool") {
        if (n.layer == "conv2d") s << ":" << n.out << ":" << n.activation;
        s << ":k" << n.kernel << "x" << (n.kernel_w > 0 ? n.kernel_w : n.kernel) << ":s" << n.stride
          << ":p" << n.pad << "x" << (n.pad_w >= 0 ? n.pad_w : n.pad);
      }
      if (n.layer == "sim") s << ":" << n.out << ":" << n.params;
      if (n.layer == "lstm") s << ":" << n.hidden << (n.bidirectional ? ":bidirectional" : "");
      if (n.layer == "reshape") {
        for (std::size_t i = 0; i < n.shape.size(); ++i) s << (i ? "x" : ":") << n.shape[i];
      }
      if (!n.inputs.empty()) {
        s << "(";
        for (std::size_t i = 0; i < n.inputs.size(); ++i) s << (i ? "," : "") << n.inputs[i];
        s << ")";
      }
    }
  }
  if (dropout > 0) s << ", dropout=" << dropout;
  for (const std::vector<std::string>& tie : ties) {
    s << ", tie=";
    for (std::size_t i = 0; i < tie.size(); ++i) s << (i ? "=" : "") << tie[i];
  }
  // Only a loss other than the default shows, so that the descriptions of existing runs (in
  // profiles and checkpoints) stay as they were.
  if (loss != "cross_entropy") s << ", loss=" << loss;
  s << ")";
  return s.str();
}

ModelSpec mlp_spec(std::vector<std::int64_t> widths) {
  ModelSpec spec;
  spec.name = "mlp";
  spec.widths = std::move(widths);
  return spec;
}

ModelSpec gpt_spec(std::int64_t layers, std::int64_t d_model, std::int64_t heads,
                   std::int64_t seq_len, std::int64_t vocab) {
  ModelSpec spec;
  spec.name = "gpt";
  spec.layers = layers;
  spec.d_model = d_model;
  spec.heads = heads;
  spec.seq_len = seq_len;
  spec.vocab = vocab;
  return spec;
}

bool is_image_model(const std::string& name) {
  return name == "vgg16" || name == "alexnet" || name == "resnet50" || name == "inception_v3";
}

bool is_sequence_model(const std::string& name) {
  return name == "gnmt" || name == "s2vt";
}

ModelSpec vgg16_small_spec(std::int64_t classes) {
  ModelSpec spec;
  spec.name = "vgg16";
  spec.width_mult = 0.125;
  spec.in_channels = 3;
  spec.image_size = 32;
  spec.classes = classes;
  return spec;
}

}  // namespace tandem::models
