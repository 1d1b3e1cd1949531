// Inputs of mixed dtypes (f32 features beside i32 token ids, as S2VT's frames and caption) travel
// packed as f32, each id the float of the same value (models/input_layout.hpp); the layer reading
// the ids gets them back as i32 (models/layers/input_view.hpp, Kernels::f32_to_i32). Only ids
// below 2^24 in magnitude are exact floats: packing refuses others, naming the input.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/input_layout.hpp"
#include "models/layers/embedding.hpp"
#include "models/layers/linear.hpp"
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

// Frames f32 [3, 2] then words i32 [3]: 9 columns per sample.
ModelSpec frames_and_words() {
  ModelSpec s;
  s.name = "graph";
  s.graph.inputs = {{"frames", {3, 2}, "f32"}, {"words", {3}, "i32"}};
  s.graph.nodes = {node("p", "linear", {"frames"}, 4), node("w", "embedding", {"words"}, 4, 40),
                   node("out", "concat", {"p", "w"})};
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

TEST(MixedInputs, PackAsExactFloats) {
  const InputLayout layout = InputLayout::of(frames_and_words().graph);
  EXPECT_TRUE(layout.packed());
  EXPECT_EQ(layout.dtype(), DType::f32);
  EXPECT_EQ(layout.width(), 9);
  EXPECT_TRUE(layout.converted(layout.inputs()[1]));
  EXPECT_FALSE(layout.converted(layout.inputs()[0]));
  const std::vector<float> frames = {0.5f, -1.25f, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<std::int32_t> words = {0, 16777215, -16777215, 7, 1, 39};
  const Tensor x = layout.pack({{"words", Tensor::from_vector(words, {2, 3})},
                                {"frames", Tensor::from_vector(frames, {2, 3, 2})}});
  ASSERT_EQ(x.dtype(), DType::f32);
  ASSERT_EQ(x.shape(), (Shape{2, 9}));
  const std::vector<float> v = x.to_float_vector();
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t c = 0; c < 6; ++c) EXPECT_EQ(v[r * 9 + c], frames[r * 6 + c]);
    for (std::size_t c = 0; c < 3; ++c) {
      // The round trip: the float holds the id exactly.
      EXPECT_EQ(static_cast<std::int32_t>(v[r * 9 + 6 + c]), words[r * 3 + c]);
    }
  }
}

TEST(MixedInputs, RefuseIdsBeyondTwoToThe24NamingTheInput) {
  const InputLayout layout = InputLayout::of(frames_and_words().graph);
  const Tensor frames = Tensor::from_vector(std::vector<float>(6, 0.0f), {1, 3, 2});
  for (const std::int32_t bad : {16777216, -16777216, 2147483647}) {
    SCOPED_TRACE(bad);
    const std::string e =
        pack_error(layout, {{"frames", frames}, {"words", ids({1, bad, 2}, {1, 3})}});
    EXPECT_NE(e.find("model input 'words'"), std::string::npos) << e;
    EXPECT_NE(e.find(std::to_string(bad)), std::string::npos) << e;
    EXPECT_NE(e.find("2^24"), std::string::npos) << e;
  }
  // Without an f32 input the ids travel as i32, bit for bit: any id packs.
  GraphSpec ids_only;
  ids_only.inputs = {{"a", {1}, "i32"}, {"b", {1}, "i32"}};
  const InputLayout i32 = InputLayout::of(ids_only);
  EXPECT_EQ(i32.dtype(), DType::i32);
  const Tensor big = ids({2147483647}, {1, 1});
  EXPECT_EQ(i32.pack({{"a", big}, {"b", big}}).to_int_vector(),
            (std::vector<std::int32_t>{2147483647, 2147483647}));
}

// The packed model computes what its layers compute on the inputs given apart: the embedding
// reads the ids back as i32.
TEST(MixedInputs, LayersReadTheirInputsBack) {
  const Model model = Model::build(frames_and_words());
  EXPECT_EQ(model.input_dtype(), DType::f32);
  EXPECT_EQ(model.input_shape(2), (Shape{2, 9}));
  const ParamSet params = model.init_params(5);
  const Tensor frames = Tensor::from_vector(
      std::vector<float>{0.5f, -1, 2, 3, -4, 5, 6, 7, 8, 9, 10, -11}, {2, 3, 2});
  const Tensor words = ids({3, 39, 0, 1, 2, 17}, {2, 3});
  const Tensor x = InputLayout::of(model.spec().graph).pack({{"frames", frames}, {"words", words}});
  Context ctx;
  ctx.training = false;
  const Tensor y = model.forward(ctx, params, x, 0, model.num_layers()).y;
  const auto p =
      Linear(2, 4).forward(ctx, model.layer_params(params, 0), frames).y.to_float_vector();
  const auto w =
      Embedding(40, 4, 3).forward(ctx, model.layer_params(params, 1), words).y.to_float_vector();
  ASSERT_EQ(y.shape(), (Shape{2, 3, 8}));
  const auto yv = y.to_float_vector();
  for (std::size_t r = 0; r < 6; ++r) {
    for (std::size_t c = 0; c < 4; ++c) {
      ASSERT_EQ(yv[r * 8 + c], p[r * 4 + c]) << r << "," << c;
      ASSERT_EQ(yv[r * 8 + 4 + c], w[r * 4 + c]) << r << "," << c;
    }
  }
}

// An embedding reads ids: an f32 input would lose its fractions, so the graph refuses it.
TEST(MixedInputs, AnEmbeddingOfAnF32InputIsRefused) {
  ModelSpec s = frames_and_words();
  s.graph.inputs[1].dtype = "f32";
  try {
    (void)Model::build(s);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("embedding reads i32 token ids, but input 'words' is f32"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::models
