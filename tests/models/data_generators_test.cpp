#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "models/data/data_spec.hpp"
#include "models/data/markov_chain.hpp"
#include "models/data/markov_text.hpp"
#include "models/data/procedural_images.hpp"
#include "models/data/teacher_classification.hpp"

namespace tandem::models::data {
namespace {

std::vector<int64_t> iota(int64_t n, int64_t first = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<float> floats(const Tensor& t) {
  return t.to_float_vector();
}
std::vector<int32_t> ints(const Tensor& t) {
  return t.to_int_vector();
}

// ---- teacher ----

TEST(TeacherDataTest, BatchLayoutAndLabelsFromTeacher) {
  TeacherSpec spec{.features = 8, .hidden = 16, .classes = 5, .seed = 3};
  TeacherClassification ds(spec, 100);
  const auto idx = iota(10, 40);
  Batch b = ds.get(idx);
  EXPECT_EQ(b.inputs.shape(), (Shape{10, 8}));
  EXPECT_EQ(b.inputs.dtype(), DType::f32);
  EXPECT_EQ(b.targets.shape(), (Shape{10}));
  EXPECT_EQ(b.targets.dtype(), DType::i32);
  const auto x = floats(b.inputs);
  const auto y = ints(b.targets);
  for (size_t i = 0; i < 10; ++i) {
    std::span<const float> xi(x.data() + i * 8, 8);
    EXPECT_EQ(y[i], ds.label(xi));
    EXPECT_GE(y[i], 0);
    EXPECT_LT(y[i], 5);
  }
}

TEST(TeacherDataTest, SamplesArePureFunctionsOfIndex) {
  TeacherSpec spec{.features = 6, .hidden = 8, .classes = 3, .seed = 11};
  TeacherClassification a(spec, 50), b(spec, 50);
  const std::vector<int64_t> one{7};
  const std::vector<int64_t> many{3, 7, 9};
  const auto xa = floats(a.get(one).inputs);
  const auto xb = floats(b.get(many).inputs);
  ASSERT_EQ(xa.size(), 6u);
  EXPECT_TRUE(std::equal(xa.begin(), xa.end(), xb.begin() + 6));
  EXPECT_EQ(ints(a.get(one).targets)[0], ints(b.get(many).targets)[1]);
}

// Samples drawn once are kept and copied on the next epoch: the copies equal fresh draws.
TEST(TeacherDataTest, KeptSamplesEqualFreshDraws) {
  TeacherSpec spec{.features = 64, .hidden = 16, .classes = 7, .seed = 4};
  TeacherClassification kept(spec, 300);
  std::vector<int64_t> first, again;
  for (int64_t i = 0; i < 300; i += 3) first.push_back(i);
  for (int64_t i = 299; i >= 0; --i) again.push_back(i);  // drawn and not yet drawn, mixed
  (void)kept.get(first);
  const Batch a = kept.get(again);
  const Batch b = TeacherClassification(spec, 300).get(again);
  EXPECT_EQ(floats(a.inputs), floats(b.inputs));
  EXPECT_EQ(ints(a.targets), ints(b.targets));
}

TEST(TeacherDataTest, ClassesRoughlyBalanced) {
  TeacherSpec spec{.features = 16, .hidden = 32, .classes = 4, .seed = 1};
  TeacherClassification ds(spec, 4000);
  const auto y = ints(ds.get(iota(4000)).targets);
  std::vector<int> count(4, 0);
  for (int32_t c : y) ++count[static_cast<size_t>(c)];
  for (int c : count) {
    EXPECT_GT(c, 4000 / 4 / 3) << "class too rare";
    EXPECT_LT(c, 4000 / 4 * 2) << "class too common";
  }
}

TEST(TeacherDataTest, EvalSplitAndSeedGiveOtherData) {
  TeacherSpec spec{.features = 4, .hidden = 8, .classes = 3, .seed = 5};
  TeacherClassification train(spec, 10, 0), eval(spec, 10, 1);
  const std::vector<int64_t> first{0};
  EXPECT_NE(floats(train.get(first).inputs), floats(eval.get(first).inputs));
  TeacherSpec other = spec;
  other.seed = 6;
  TeacherClassification o(other, 10, 0);
  EXPECT_NE(floats(train.get(first).inputs), floats(o.get(first).inputs));
  // Same inputs, other teacher: labels differ on a good share of a sample.
  TeacherClassification big(spec, 400), big_other(other, 400);
  const auto xs = floats(big.get(iota(400)).inputs);
  int differ = 0;
  for (size_t i = 0; i < 400; ++i) {
    std::span<const float> xi(xs.data() + i * 4, 4);
    differ += big.label(xi) != big_other.label(xi);
  }
  EXPECT_GT(differ, 40);
}

TEST(TeacherDataTest, OutOfRangeIndexNamesIt) {
  TeacherClassification ds(TeacherSpec{}, 5);
  const std::vector<int64_t> bad{2, 5};
  try {
    ds.get(bad);
    FAIL() << "expected out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("index 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TeacherClassification(TeacherSpec{.classes = 1}, 5), std::invalid_argument);
}

// ---- procedural images ----

struct Image {
  std::vector<float> px;  // [C, n, n]
  int64_t c, n;
  float at(int64_t ch, int64_t y, int64_t x) const {
    return px[static_cast<size_t>((ch * n + y) * n + x)];
  }
};

// Renders the first sample of class `label` found among indices [0, 400).
Image first_of_class(const ProceduralImages& ds, int32_t label, const ProceduralImagesSpec& s) {
  for (int64_t i = 0; i < 400; ++i) {
    if (ds.label(i) != label) continue;
    const std::vector<int64_t> one{i};
    return {floats(ds.get(one).inputs), s.channels, s.image_size};
  }
  ADD_FAILURE() << "no sample of class " << label;
  return {};
}

// Foreground pixels: the minority value of channel 0 (no noise, so exactly two values).
std::vector<std::vector<bool>> foreground(const Image& im) {
  std::map<float, int> values;
  for (int64_t y = 0; y < im.n; ++y)
    for (int64_t x = 0; x < im.n; ++x) ++values[im.at(0, y, x)];
  EXPECT_EQ(values.size(), 2u);
  const float fg = values.begin()->second < values.rbegin()->second ? values.begin()->first
                                                                    : values.rbegin()->first;
  std::vector<std::vector<bool>> m(static_cast<size_t>(im.n),
                                   std::vector<bool>(static_cast<size_t>(im.n)));
  for (int64_t y = 0; y < im.n; ++y)
    for (int64_t x = 0; x < im.n; ++x)
      m[static_cast<size_t>(y)][static_cast<size_t>(x)] = im.at(0, y, x) == fg;
  return m;
}

// Share of the foreground's bounding box that is foreground.
double box_fill(const std::vector<std::vector<bool>>& m) {
  int64_t y0 = 1 << 20, y1 = -1, x0 = 1 << 20, x1 = -1, on = 0;
  for (int64_t y = 0; y < static_cast<int64_t>(m.size()); ++y)
    for (int64_t x = 0; x < static_cast<int64_t>(m.size()); ++x)
      if (m[static_cast<size_t>(y)][static_cast<size_t>(x)]) {
        y0 = std::min(y0, y), y1 = std::max(y1, y), x0 = std::min(x0, x), x1 = std::max(x1, x);
        ++on;
      }
  if (on == 0) return 0;
  return static_cast<double>(on) / static_cast<double>((y1 - y0 + 1) * (x1 - x0 + 1));
}

TEST(ProceduralImagesTest, LayoutLabelsAndBalance) {
  ProceduralImagesSpec spec{.channels = 3, .image_size = 32, .classes = 6, .noise = 0.1, .seed = 2};
  ProceduralImages ds(spec, 3000);
  EXPECT_EQ(ds.input_shape(), (Shape{3, 32, 32}));
  Batch b = ds.get(iota(600));
  EXPECT_EQ(b.inputs.shape(), (Shape{600, 3, 32, 32}));
  const auto y = ints(b.targets);
  std::vector<int> count(6, 0);
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_EQ(y[i], ds.label(static_cast<int64_t>(i)));
    ++count[static_cast<size_t>(y[i])];
  }
  for (int c : count) EXPECT_GT(c, 600 / 6 / 2);
  for (float v : floats(b.inputs)) ASSERT_TRUE(std::isfinite(v));
}

TEST(ProceduralImagesTest, StripesRunAlongTheirOrientation) {
  ProceduralImagesSpec spec{.channels = 1, .image_size = 32, .classes = 6, .noise = 0.0, .seed = 4};
  ProceduralImages ds(spec, 400);
  const Image h = first_of_class(ds, 0, spec);
  const Image v = first_of_class(ds, 1, spec);
  const Image d = first_of_class(ds, 2, spec);
  bool h_rows_const = true, h_cols_vary = false, v_cols_const = true, d_diag_const = true;
  for (int64_t a = 0; a < 32; ++a) {
    for (int64_t b = 1; b < 32; ++b) {
      h_rows_const &= h.at(0, a, b) == h.at(0, a, 0);
      h_cols_vary |= h.at(0, b, a) != h.at(0, 0, a);
      v_cols_const &= v.at(0, b, a) == v.at(0, 0, a);
    }
  }
  for (int64_t y = 1; y < 32; ++y)
    for (int64_t x = 0; x + 1 < 32; ++x) d_diag_const &= d.at(0, y, x) == d.at(0, y - 1, x + 1);
  EXPECT_TRUE(h_rows_const);
  EXPECT_TRUE(h_cols_vary);
  EXPECT_TRUE(v_cols_const);
  EXPECT_TRUE(d_diag_const);
}

TEST(ProceduralImagesTest, SquareFillsItsBoxAndDiscDoesNot) {
  ProceduralImagesSpec spec{.channels = 1, .image_size = 32, .classes = 6, .noise = 0.0, .seed = 9};
  ProceduralImages ds(spec, 400);
  EXPECT_DOUBLE_EQ(box_fill(foreground(first_of_class(ds, 3, spec))), 1.0);
  const double disc = box_fill(foreground(first_of_class(ds, 4, spec)));
  EXPECT_GT(disc, 0.65);
  EXPECT_LT(disc, 0.9);
  const double cross = box_fill(foreground(first_of_class(ds, 5, spec)));
  EXPECT_GT(cross, 0.3);
  EXPECT_LT(cross, 0.7);
  EXPECT_EQ(procedural_image_kind(4), "disc");
}

TEST(ProceduralImagesTest, DeterministicAndSplitsDiffer) {
  ProceduralImagesSpec spec{.channels = 3, .image_size = 32, .classes = 4, .noise = 0.2, .seed = 7};
  ProceduralImages a(spec, 20), b(spec, 20), eval(spec, 20, 1);
  const auto idx = iota(20);
  EXPECT_EQ(floats(a.get(idx).inputs), floats(b.get(idx).inputs));
  EXPECT_NE(floats(a.get(idx).inputs), floats(eval.get(idx).inputs));
  EXPECT_THROW(ProceduralImages(ProceduralImagesSpec{.classes = 9}, 5), std::invalid_argument);
}

// ---- Markov chain ----

TEST(MarkovChainTest, StochasticAndStationary) {
  MarkovChain chain(MarkovSpec{.vocab = 12, .order = 2, .sharpness = 2.0, .seed = 3});
  ASSERT_EQ(chain.states(), 144);
  const auto& p = chain.transitions();
  for (int64_t s = 0; s < chain.states(); ++s) {
    double sum = 0;
    for (int64_t c = 0; c < 12; ++c) {
      EXPECT_GT(p[static_cast<size_t>(s * 12 + c)], 0.0);
      sum += p[static_cast<size_t>(s * 12 + c)];
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  // pi P = pi, with the context shifting by one token.
  const auto& pi = chain.stationary();
  std::vector<double> next(pi.size(), 0.0);
  for (size_t s = 0; s < pi.size(); ++s)
    for (size_t c = 0; c < 12; ++c) next[(s * 12) % pi.size() + c] += pi[s] * p[s * 12 + c];
  EXPECT_NEAR(std::accumulate(pi.begin(), pi.end(), 0.0), 1.0, 1e-12);
  for (size_t s = 0; s < pi.size(); ++s) EXPECT_NEAR(next[s], pi[s], 1e-12);
}

TEST(MarkovChainTest, UniformChainHasEntropyLogVocab) {
  MarkovChain chain(MarkovSpec{.vocab = 7, .order = 1, .sharpness = 0.0, .seed = 1});
  EXPECT_NEAR(chain.entropy_rate(), std::log(7.0), 1e-12);
  EXPECT_NEAR(chain.optimal_window_loss(16), std::log(7.0), 1e-12);
}

// Plug-in estimate of H(next | previous k tokens) from a stream.
double empirical_conditional_entropy(const std::vector<uint16_t>& t, int k, size_t skip = 0) {
  std::map<std::vector<uint16_t>, std::map<uint16_t, double>> counts;
  double total = 0;
  for (size_t i = std::max<size_t>(k, skip); i < t.size(); ++i) {
    std::vector<uint16_t> ctx(t.begin() + static_cast<std::ptrdiff_t>(i) - k,
                              t.begin() + static_cast<std::ptrdiff_t>(i));
    counts[ctx][t[i]] += 1;
    total += 1;
  }
  double h = 0;
  for (const auto& [ctx, next] : counts) {
    double n = 0;
    for (const auto& kv : next) n += kv.second;
    for (const auto& kv : next) h -= kv.second / total * std::log(kv.second / n);
  }
  return h;
}

TEST(MarkovChainTest, EntropyRateMatchesGeneratedText) {
  MarkovChain chain(MarkovSpec{.vocab = 8, .order = 1, .sharpness = 1.5, .seed = 21});
  EXPECT_GT(chain.entropy_rate(), 0.2);
  EXPECT_LT(chain.entropy_rate(), std::log(8.0) - 0.05);
  const auto text = chain.generate(400000, 0);
  EXPECT_NEAR(empirical_conditional_entropy(text, 1), chain.entropy_rate(), 0.01);
  // Token frequencies follow the stationary distribution.
  std::vector<double> freq(8, 0.0);
  for (uint16_t c : text) freq[c] += 1.0 / static_cast<double>(text.size());
  for (size_t c = 0; c < 8; ++c) EXPECT_NEAR(freq[c], chain.stationary()[c], 0.01);
}

TEST(MarkovChainTest, SecondOrderWindowLossCountsShortContexts) {
  MarkovChain chain(MarkovSpec{.vocab = 6, .order = 2, .sharpness = 2.5, .seed = 8});
  const auto text = chain.generate(400000, 3);
  EXPECT_NEAR(empirical_conditional_entropy(text, 2), chain.entropy_rate(), 0.01);
  // A window's first target sees one token of context: H(X1 | X0) > entropy rate.
  const double h1 = empirical_conditional_entropy(text, 1);
  EXPECT_NEAR(chain.optimal_window_loss(1), h1, 0.01);
  EXPECT_GT(chain.optimal_window_loss(1), chain.entropy_rate() + 0.05);
  EXPECT_NEAR(chain.optimal_window_loss(10),
              (chain.optimal_window_loss(1) + 9 * chain.entropy_rate()) / 10, 1e-12);
}

TEST(MarkovChainTest, GenerationIsDeterministicPerStream) {
  MarkovChain chain(MarkovSpec{.vocab = 10, .order = 1, .sharpness = 2.0, .seed = 4});
  EXPECT_EQ(chain.generate(1000, 5), chain.generate(1000, 5));
  EXPECT_NE(chain.generate(1000, 5), chain.generate(1000, 6));
  MarkovChain same(MarkovSpec{.vocab = 10, .order = 1, .sharpness = 2.0, .seed = 4});
  EXPECT_EQ(same.generate(1000, 5), chain.generate(1000, 5));
  EXPECT_THROW(MarkovChain(MarkovSpec{.vocab = 1}), std::invalid_argument);
}

// check() is what a config is validated with: it must refuse exactly what the constructor
// refuses, and count the same contexts.
TEST(MarkovChainTest, CheckAgreesWithTheConstructor) {
  const MarkovSpec specs[] = {{.vocab = 1},
                              {.vocab = 65537},
                              {.vocab = 4, .order = 0},
                              {.vocab = 4, .order = 11},
                              {.vocab = 2048, .order = 2},
                              {.vocab = 4, .sharpness = -1},
                              {.vocab = 5, .order = 3},
                              {.vocab = 2, .order = 22},
                              {.vocab = 3, .order = 1}};
  for (const MarkovSpec& spec : specs) {
    SCOPED_TRACE(std::to_string(spec.vocab) + "^" + std::to_string(spec.order));
    bool built = false;
    int64_t states = 0;
    try {
      states = MarkovChain(spec).states();
      built = true;
    } catch (const std::invalid_argument&) {
    }
    if (built) {
      EXPECT_EQ(MarkovChain::check(spec), states);
    } else {
      EXPECT_THROW(MarkovChain::check(spec), std::invalid_argument);
    }
  }
}

TEST(MarkovTextTest, WindowsAreShiftedAndContiguous) {
  MarkovText ds(MarkovSpec{.vocab = 16, .order = 1, .sharpness = 2.0, .seed = 1}, 50, 8);
  EXPECT_EQ(ds.size(), 50);
  EXPECT_EQ(ds.task(), Task::language_modeling);
  Batch b = ds.get(iota(50));
  EXPECT_EQ(b.inputs.shape(), (Shape{50, 8}));
  EXPECT_EQ(b.inputs.dtype(), DType::i32);
  const auto x = ints(b.inputs), y = ints(b.targets);
  for (size_t i = 0; i < 50; ++i) {
    for (size_t j = 0; j + 1 < 8; ++j) EXPECT_EQ(y[i * 8 + j], x[i * 8 + j + 1]);
    if (i + 1 < 50) {
      EXPECT_EQ(y[i * 8 + 7], x[(i + 1) * 8]);
    }
  }
  for (int32_t t : x) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 16);
  }
  EXPECT_DOUBLE_EQ(ds.optimal_loss(), ds.entropy_rate());
}

// ---- make_datasets ----

TEST(MakeDatasetsTest, GeneratedKindsHaveHeldOutEval) {
  Datasets teacher = make_datasets(TeacherData{.spec = {}, .samples = 100}, 30);
  EXPECT_EQ(teacher.train->size(), 100);
  ASSERT_NE(teacher.eval, nullptr);
  EXPECT_EQ(teacher.eval->size(), 30);

  Datasets markov = make_datasets(MarkovTextData{.spec = {}, .samples = 20, .seq_len = 16}, 5);
  ASSERT_NE(markov.eval, nullptr);
  const auto& tr = dynamic_cast<const MarkovText&>(*markov.train);
  const auto& ev = dynamic_cast<const MarkovText&>(*markov.eval);
  EXPECT_EQ(&tr.chain(), &ev.chain());
  const std::vector<int64_t> first{0};
  EXPECT_NE(ints(tr.get(first).inputs), ints(ev.get(first).inputs));
  EXPECT_EQ(data_kind_name(MarkovTextData{}), "markov-text");

  Datasets images = make_datasets(ProceduralImagesData{.spec = {}, .samples = 10}, 0);
  EXPECT_EQ(images.eval, nullptr);
}

}  // namespace
}  // namespace tandem::models::data
