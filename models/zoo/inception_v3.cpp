#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "models/zoo/graph_writer.hpp"
#include "models/zoo/image_graphs.hpp"

namespace tandem::models::zoo {
namespace {

// torchvision's Inception3 modules; `c` scales a channel count by the width multiplier.
class InceptionWriter {
 public:
  InceptionWriter(GraphWriter& w, double width_mult) : w_(w), mult_(width_mult) {}

  std::int64_t c(double channels) const {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(channels * mult_)));
  }
  std::string unit(const std::string& in, double out, std::int64_t kh, std::int64_t kw,
                   std::int64_t stride = 1, std::int64_t ph = 0, std::int64_t pw = 0) {
    return w_.conv_bn_relu(in, c(out), kh, kw, stride, ph, pw);
  }

  std::string a(const std::string& x, double pool_features) {
    const std::string b1 = unit(x, 64, 1, 1);
    const std::string b5 = unit(unit(x, 48, 1, 1), 64, 5, 5, 1, 2, 2);
    const std::string b3 = unit(unit(unit(x, 64, 1, 1), 96, 3, 3, 1, 1, 1), 96, 3, 3, 1, 1, 1);
    const std::string bp = unit(w_.avg_pool(x, 3, 1, 1), pool_features, 1, 1);
    return w_.concat_channels({b1, b5, b3, bp});
  }
  std::string b(const std::string& x) {
    const std::string b3 = unit(x, 384, 3, 3, 2);
    const std::string bd = unit(unit(unit(x, 64, 1, 1), 96, 3, 3, 1, 1, 1), 96, 3, 3, 2);
    return w_.concat_channels({b3, bd, w_.max_pool(x, 3, 2, 0)});
  }
  std::string c7(const std::string& x, double mid) {
    const std::string b1 = unit(x, 192, 1, 1);
    std::string b7 = unit(x, mid, 1, 1);
    b7 = unit(b7, mid, 1, 7, 1, 0, 3);
    b7 = unit(b7, 192, 7, 1, 1, 3, 0);
    std::string bd = unit(x, mid, 1, 1);
    bd = unit(bd, mid, 7, 1, 1, 3, 0);
    bd = unit(bd, mid, 1, 7, 1, 0, 3);
    bd = unit(bd, mid, 7, 1, 1, 3, 0);
    bd = unit(bd, 192, 1, 7, 1, 0, 3);
    const std::string bp = unit(w_.avg_pool(x, 3, 1, 1), 192, 1, 1);
    return w_.concat_channels({b1, b7, bd, bp});
  }
  std::string d(const std::string& x) {
    const std::string b3 = unit(unit(x, 192, 1, 1), 320, 3, 3, 2);
    std::string b7 = unit(x, 192, 1, 1);
    b7 = unit(b7, 192, 1, 7, 1, 0, 3);
    b7 = unit(b7, 192, 7, 1, 1, 3, 0);
    b7 = unit(b7, 192, 3, 3, 2);
    return w_.concat_channels({b3, b7, w_.max_pool(x, 3, 2, 0)});
  }
  std::string e(const std::string& x) {
    const std::string b1 = unit(x, 320, 1, 1);
    const std::string b3 = unit(x, 384, 1, 1);
    const std::string b3s =
        w_.concat_channels({unit(b3, 384, 1, 3, 1, 0, 1), unit(b3, 384, 3, 1, 1, 1, 0)});
    const std::string bd = unit(unit(x, 448, 1, 1), 384, 3, 3, 1, 1, 1);
    const std::string bds =
        w_.concat_channels({unit(bd, 384, 1, 3, 1, 0, 1), unit(bd, 384, 3, 1, 1, 1, 0)});
    const std::string bp = unit(w_.avg_pool(x, 3, 1, 1), 192, 1, 1);
    return w_.concat_channels({b1, b3s, bds, bp});
  }

 private:
  GraphWriter& w_;
  double mult_;
};

}  // namespace

GraphSpec inception_v3_graph(const ModelSpec& spec) {
  auto require = [&](bool ok, const std::string& field, const std::string& why) {
    if (!ok) throw std::invalid_argument("model spec inception_v3: field '" + field + "' " + why);
  };
  require(spec.width_mult > 0, "width_mult", "must be positive");
  require(spec.in_channels > 0, "in_channels", "must be positive");
  require(spec.image_size >= 75, "image_size",
          "must be at least 75 (the stem and the two stride-2 modules)");
  require(spec.classes > 0, "classes", "must be positive");
  require(spec.dropout >= 0 && spec.dropout < 1, "dropout", "must be in [0, 1)");
  GraphSpec g;
  g.input_name = "image";
  g.input_shape = {spec.in_channels, spec.image_size, spec.image_size};
  GraphWriter w(g);
  InceptionWriter m(w, spec.width_mult);
  std::string x = m.unit("image", 32, 3, 3, 2);
  x = m.unit(x, 32, 3, 3);
  x = m.unit(x, 64, 3, 3, 1, 1, 1);
  x = w.max_pool(x, 3, 2, 0);
  x = m.unit(x, 80, 1, 1);
  x = m.unit(x, 192, 3, 3);
  x = w.max_pool(x, 3, 2, 0);
  x = m.a(x, 32);
  x = m.a(x, 64);
  x = m.a(x, 64);
  x = m.b(x);
  for (const double mid : {128.0, 160.0, 160.0, 192.0}) x = m.c7(x, mid);
  x = m.d(x);
  x = m.e(x);
  x = m.e(x);
  x = w.global_avg_pool(x);
  if (spec.dropout > 0) x = w.dropout(x, spec.dropout);
  w.linear(x, spec.classes);
  return g;
}

}  // namespace tandem::models::zoo
