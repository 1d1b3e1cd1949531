#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "models/zoo/graph_writer.hpp"
#include "models/zoo/image_graphs.hpp"

namespace tandem::models::zoo {
namespace {

// A bottleneck block: 1x1 down to `width`, 3x3 (carrying the stride), 1x1 up to 4 * width,
// added to the input (through a 1x1 projection when the stride or the channels change).
std::string bottleneck(GraphWriter& w, const std::string& in, std::int64_t in_channels,
                       std::int64_t width, std::int64_t stride) {
  const std::int64_t out = 4 * width;
  std::string y = w.conv_bn_relu(in, width, 1, 1, 0);
  y = w.conv_bn_relu(y, width, 3, stride, 1);
  y = w.batch_norm(w.conv(y, out, 1, 1, 0));
  std::string shortcut = in;
  if (stride != 1 || in_channels != out) shortcut = w.batch_norm(w.conv(in, out, 1, stride, 0));
  return w.relu(w.add({y, shortcut}));
}

}  // namespace

GraphSpec resnet50_graph(const ModelSpec& spec) {
  auto require = [&](bool ok, const std::string& field, const std::string& why) {
    if (!ok) throw std::invalid_argument("model spec resnet50: field '" + field + "' " + why);
  };
  require(spec.width_mult > 0, "width_mult", "must be positive");
  require(spec.in_channels > 0, "in_channels", "must be positive");
  require(spec.image_size >= 32, "image_size", "must be at least 32 (five halvings)");
  require(spec.classes > 0, "classes", "must be positive");
  auto scaled = [&](double c) {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(c * spec.width_mult)));
  };
  GraphSpec g;
  g.input_name = "image";
  g.input_shape = {spec.in_channels, spec.image_size, spec.image_size};
  GraphWriter w(g);
  std::string x = w.conv_bn_relu("image", scaled(64), 7, 2, 3);
  x = w.max_pool(x, 3, 2, 1);
  std::int64_t channels = scaled(64);
  const int blocks[] = {3, 4, 6, 3};
  const double widths[] = {64, 128, 256, 512};
  for (int layer = 0; layer < 4; ++layer) {
    const std::int64_t width = scaled(widths[layer]);
    for (int b = 0; b < blocks[layer]; ++b) {
      const std::int64_t stride = layer > 0 && b == 0 ? 2 : 1;
      x = bottleneck(w, x, channels, width, stride);
      channels = 4 * width;
    }
  }
  w.linear(w.global_avg_pool(x), spec.classes);
  return g;
}

}  // namespace tandem::models::zoo
