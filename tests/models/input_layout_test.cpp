// Named model inputs: two or more travel packed in one tensor (models/input_layout.hpp), and a
// layer that reads one reads exactly its columns (models/layers/input_view.hpp). Packing checks
// every named tensor against the declaration and names what does not fit.
#include "models/input_layout.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "models/layers/embedding.hpp"
#include "models/model.hpp"

namespace tandem::models {
namespace {

GraphNode node(std::string name, std::string layer, std::vector<std::string> inputs,
               std::int64_t out = 0, std::int64_t vocab = 0) {
  GraphNode n;
  n.name = std::move(name);
  n.layer = std::move(layer);
  n.inputs = std::move(inputs);
  n.out = out;
  n.vocab = vocab;
  return n;
}

// Inputs only: the packing tests need no layers.
ModelSpec two_inputs() {
  ModelSpec s;
  s.name = "graph";
  s.graph.inputs = {{"src", {5}, "i32"}, {"tgt", {3, 2}, "i32"}};
  return s;
}

Tensor ids(std::vector<std::int32_t> v, Shape shape) {
  return Tensor::from_vector(v, std::move(shape));
}

std::string pack_error(const InputLayout& layout, const std::vector<NamedTensor>& named) {
  try {
    (void)layout.pack(named);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

ModelSpec two_sequences() {
  ModelSpec s;
  s.name = "graph";
  s.graph.inputs = {{"src", {5}, "i32"}, {"tgt", {5}, "i32"}};
  s.graph.nodes = {node("es", "embedding", {"src"}, 4, 9), node("et", "embedding", {"tgt"}, 4, 9),
                   node("out", "concat", {"es", "et"})};
  return s;
}

TEST(InputLayout, PacksInputsInDeclarationOrder) {
  const InputLayout layout = InputLayout::of(two_inputs().graph);
  ASSERT_TRUE(layout.packed());
  EXPECT_EQ(layout.width(), 11);
  EXPECT_EQ(layout.dtype(), DType::i32);
  EXPECT_EQ(layout.batch_shape(2), (Shape{2, 11}));
  const Tensor packed =
      layout.pack({{"tgt", ids({10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25}, {2, 3, 2})},
                   {"src", ids({0, 1, 2, 3, 4, 5, 6, 7, 8, 0}, {2, 5})}});
  EXPECT_EQ(packed.to_int_vector(),
            (std::vector<std::int32_t>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 15,
                                       5, 6, 7, 8, 0, 20, 21, 22, 23, 24, 25}));
}

TEST(InputLayout, RefusesWhatDoesNotFitNamingTheInput) {
  const InputLayout layout = InputLayout::of(two_inputs().graph);
  const Tensor src = ids({0, 1, 2, 3, 4}, {1, 5});
  const Tensor tgt = ids({0, 1, 2, 3, 4, 5}, {1, 3, 2});
  EXPECT_NE(pack_error(layout, {{"src", src}}).find("'tgt': missing"), std::string::npos);
  EXPECT_NE(pack_error(layout, {{"src", src}, {"tgt", tgt}, {"src", src}}).find("given twice"),
            std::string::npos);
  EXPECT_NE(pack_error(layout, {{"src", src}, {"tgt", tgt}, {"x", src}})
                .find("'x': the model has no such input"),
            std::string::npos);
  EXPECT_NE(pack_error(layout, {{"src", src}, {"tgt", ids({0, 1, 2, 3, 4, 5}, {1, 6})}})
                .find("'tgt': shape [1, 6], expected [batch, 3, 2]"),
            std::string::npos);
  EXPECT_NE(pack_error(layout, {{"src", Tensor::zeros({1, 5})}, {"tgt", tgt}})
                .find("'src': is f32, expected i32"),
            std::string::npos);
  EXPECT_NE(pack_error(layout, {{"src", ids({0, 1, 2, 3, 4, 0, 1, 2, 3, 4}, {2, 5})}, {"tgt", tgt}})
                .find("has 1 samples"),
            std::string::npos);
}

std::string layout_error(GraphSpec g) {
  try {
    (void)InputLayout::of(g);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(InputLayout, RefusesBadDeclarations) {
  GraphSpec g;
  g.inputs = {{"a", {2}, "i32"}, {"a", {2}, "i32"}};
  EXPECT_NE(layout_error(g).find("'a': declared twice"), std::string::npos);
  // Mixed dtypes are a declaration, not an error (tests/models/mixed_inputs_test.cpp).
  g.inputs = {{"a", {2}, "i32"}, {"b", {2}, "f32"}};
  EXPECT_EQ(layout_error(g), "");
  g.inputs = {{"a", {2, 0}, "f32"}};
  EXPECT_NE(layout_error(g).find("positive"), std::string::npos);
  g.inputs = {{"a", {}, "f32"}};
  EXPECT_NE(layout_error(g).find("no shape"), std::string::npos);
  g.inputs = {{"a", {2}, "f64"}};
  EXPECT_NE(layout_error(g).find("dtype 'f64'"), std::string::npos);
  g.inputs = {{"a", {std::int64_t{1} << 30, std::int64_t{1} << 30}, "f32"}};
  EXPECT_NE(layout_error(g).find("2^40"), std::string::npos);
}

// The packed model computes what its layers compute on the inputs given apart.
TEST(InputLayout, ALayerReadsItsInputsColumns) {
  const Model model = Model::build(two_sequences());
  EXPECT_EQ(model.input_shape(2), (Shape{2, 10}));
  EXPECT_EQ(model.input_dtype(), DType::i32);
  const ParamSet params = model.init_params(3);
  const Tensor src = ids({1, 2, 3, 4, 5, 6, 7, 8, 0, 1}, {2, 5});
  const Tensor tgt = ids({8, 7, 6, 5, 4, 3, 2, 1, 0, 8}, {2, 5});
  const Tensor x = InputLayout::of(model.spec().graph).pack({{"src", src}, {"tgt", tgt}});
  Context ctx;
  ctx.training = false;
  const Tensor y = model.forward(ctx, params, x, 0, model.num_layers()).y;
  const Embedding alone(9, 4, 5);
  const auto es = alone.forward(ctx, model.layer_params(params, 0), src).y.to_float_vector();
  const auto et = alone.forward(ctx, model.layer_params(params, 1), tgt).y.to_float_vector();
  ASSERT_EQ(y.shape(), (Shape{2, 5, 8}));
  const auto yv = y.to_float_vector();
  for (std::size_t r = 0; r < 10; ++r) {
    for (std::size_t c = 0; c < 4; ++c) {
      ASSERT_EQ(yv[r * 8 + c], es[r * 4 + c]) << r << "," << c;
      ASSERT_EQ(yv[r * 8 + 4 + c], et[r * 4 + c]) << r << "," << c;
    }
  }
}

TEST(InputLayout, AGraphRefusesAnUnknownInputOrAFirstNodeWithoutOne) {
  ModelSpec s = two_sequences();
  s.graph.nodes[0].inputs = {"nope"};
  try {
    (void)Model::build(s);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "neither an earlier node nor an input (src: i32[5], tgt: i32[5])"),
              std::string::npos)
        << e.what();
  }
  s = two_sequences();
  s.graph.nodes[0].inputs = {};
  try {
    (void)Model::build(s);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("names no input, and the model has several"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::models
