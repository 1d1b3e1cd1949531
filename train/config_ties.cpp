#include "train/config_ties.hpp"

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/tie_names.hpp"

namespace tandem::train {
namespace {

struct KnownParam {
  int layer = 0;
  Shape shape;
};

// Where a name was tied first: its tie's index, or -1 for the model kind's own tie.
struct TiedAt {
  int tie = 0;
  std::string as_written;
};

std::string layer_params_hint(const models::Model& model, int layer) {
  std::string names;
  for (const models::ParamSpec& ps : model.layer(layer).param_specs()) {
    names += (names.empty() ? "" : ", ") + ps.name;
  }
  return names.empty() ? "layer " + std::to_string(layer) + " has no parameters"
                       : "layer " + std::to_string(layer) + "'s are " + names;
}

// Why `param` (the index form of `written`) names no parameter, with what would.
std::string unknown_param(const models::Model& model, const std::string& written,
                          const std::string& param) {
  std::string what = "no parameter '" + written + "'";
  if (param != written) what += " ('" + param + "')";
  const std::size_t dot = param.find('.');
  int layer = -1;
  if (dot != std::string::npos && dot > 0 && dot < 10 &&
      param.find_first_not_of("0123456789") == dot) {
    layer = std::stoi(param.substr(0, dot));
  }
  if (layer >= 0 && layer < model.num_layers())
    return what + ": " + layer_params_hint(model, layer);
  return what + " (names are <layer index>.<parameter>" +
         std::string(model.spec().name == "graph" ? " or <node>.<parameter>" : "") +
         ", e.g. 0.weight; the model has layers 0 to " + std::to_string(model.num_layers() - 1) +
         ")";
}

class TieReader {
 public:
  TieReader(ConfigMap& m, const models::Model& untied) : m_(m), untied_(untied) {
    for (int l = 0; l < untied.num_layers(); ++l) {
      for (const models::ParamSpec& ps : untied.layer(l).param_specs()) {
        known_[untied.param_name(l, ps.name)] = {l, ps.shape};
      }
    }
    // The model kind's own ties (a gpt's tie_embeddings) hold their copies already.
    for (const models::TieGroup& g : untied.ties()) {
      for (const models::TieCopy& c : g.copies) tied_[c.name] = {-1, c.name};
    }
  }

  std::vector<std::vector<std::string>> read(const YAML::Node& tie) {
    const std::string key = m_.key_path("tie");
    if (!tie.IsSequence() || tie.size() == 0) {
      m_.fail("tie",
              "expected a list of parameter names ([0.weight, 13.weight]) or a list of such "
              "lists");
    }
    std::vector<std::vector<std::string>> out;
    if (!tie[0].IsSequence()) {
      out.push_back(read_tie(tie, 0, key));
      return out;
    }
    for (std::size_t t = 0; t < tie.size(); ++t) {
      const std::string at = key + "[" + std::to_string(t) + "]";
      if (!tie[t].IsSequence()) {
        fail(tie[t], at, "a list of ties holds lists of names only (one tie: tie: [a, b])");
      }
      out.push_back(read_tie(tie[t], static_cast<int>(t), at));
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const YAML::Node& n, const std::string& at, const std::string& what) {
    throw ConfigError(m_.location(n), at, what);
  }

  std::vector<std::string> read_tie(const YAML::Node& names, int t, const std::string& at) {
    if (names.size() < 2) fail(names, at, "a tie names at least two parameters");
    std::vector<std::string> out;
    const KnownParam* first = nullptr;
    std::string first_name;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const YAML::Node& n = names[i];
      const std::string here = at + "[" + std::to_string(i) + "]";
      if (!n.IsScalar()) fail(n, here, "expected a parameter name (<layer index>.<parameter>)");
      const std::string written = n.Scalar();
      const std::string param = models::tie_param_name(untied_.spec(), written);
      const auto it = known_.find(param);
      if (it == known_.end()) fail(n, here, unknown_param(untied_, written, param));
      const auto [seen, fresh] = tied_.emplace(param, TiedAt{t, written});
      if (!fresh) {
        const TiedAt& before = seen->second;
        fail(n, here,
             "'" + written + "' is already tied" +
                 (before.tie < 0 ? " by tie_embeddings (the head's weight is the token embedding)"
                  : before.tie == t ? " in this tie"
                                    : " in tie " + std::to_string(before.tie) + " (as '" +
                                          before.as_written + "')"));
      }
      if (first == nullptr) {
        first = &it->second;
        first_name = written;
      } else if (it->second.shape != first->shape) {
        fail(n, here,
             "'" + written + "' has shape " + shape_str(it->second.shape) + ", but '" + first_name +
                 "' has " + shape_str(first->shape) + " (tied parameters share one shape)");
      }
      out.push_back(param);
    }
    return out;
  }

  ConfigMap& m_;
  const models::Model& untied_;
  std::map<std::string, KnownParam> known_;
  std::map<std::string, TiedAt> tied_;
};

}  // namespace

void read_ties(ConfigMap& m, const models::Model& untied, models::ModelSpec& spec) {
  spec.ties = TieReader(m, untied).read(m.node("tie"));
  // What the model itself would refuse and the checks above missed, at the key.
  try {
    (void)untied.with_ties(spec.ties);
  } catch (const std::invalid_argument& e) {
    m.fail("tie", e.what());
  }
}

}  // namespace tandem::train
