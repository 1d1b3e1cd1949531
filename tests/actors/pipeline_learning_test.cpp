// 4-stage pipelines with PipeDream's schedule (weight stashing, 1F1B in steady state) learn:
// a GPT on generated Markov text, and the graph zoo's ResNet-50 and Inception-v3 (batch norm on
// every stage) on procedural images. The loss of the last minibatches falls well below that of
// the first ones (data through dataset_source).
#include <gtest/gtest.h>

#include <numeric>

#include "actors/dataset_source.hpp"
#include "models/data/markov_text.hpp"
#include "models/data/procedural_images.hpp"
#include "pipeline_harness.hpp"
#include "runtime/scheduler.hpp"

namespace tandem::actors {
namespace {

using namespace testing;

double mean(const std::vector<double>& v, std::size_t from, std::size_t to) {
  return std::accumulate(v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(to),
                         0.0) /
         static_cast<double>(to - from);
}

TEST(PipelineLearning, FourStagePipeDreamGptLearnsMarkovText) {
  models::data::MarkovSpec chain;
  chain.vocab = 16;
  auto text = std::make_shared<models::data::MarkovText>(chain, 4096, 16);
  const models::Model model = models::Model::build(models::gpt_spec(2, 32, 4, 16, 16));
  schedules::ScheduleParams p;
  p.kind = schedules::ScheduleKind::pipedream;
  p.stages = 4;
  p.minibatch_size = 16;
  p.minibatches = 150;
  PipelineSpec spec;
  spec.model = &model;
  spec.plan = even_plan(model, p);
  spec.optimizer.kind = "adamw";
  spec.optimizer.lr = 3e-3;
  spec.seed = 2;
  spec.data = dataset_source(text, model, 16, 2);
  Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
  const PipelineResult r = pipeline.run();
  ASSERT_EQ(r.losses.size(), 150u);
  const double first = mean(r.losses, 0, 10);
  const double last = mean(r.losses, 140, 150);
  EXPECT_LT(last, first - 0.5) << "first " << first << " last " << last << " entropy rate "
                               << text->entropy_rate();
}

TEST(PipelineLearning, FourStagePipeDreamResNetAndInceptionLearnImages) {
  for (const char* name : {"resnet50", "inception_v3"}) {
    models::ModelSpec s;
    s.name = name;
    s.width_mult = s.name == "resnet50" ? 1.0 / 8 : 1.0 / 16;
    s.image_size = s.name == "resnet50" ? 32 : 75;
    s.classes = 4;
    const models::Model model = models::Model::build(s);
    models::data::ProceduralImagesSpec images;
    images.image_size = s.image_size;
    images.classes = 4;
    auto data = std::make_shared<models::data::ProceduralImages>(images, 2048);
    schedules::ScheduleParams p;
    p.kind = schedules::ScheduleKind::pipedream;
    p.stages = 4;
    p.minibatch_size = 16;
    p.minibatches = 120;
    PipelineSpec spec;
    spec.model = &model;
    spec.plan = even_plan(model, p);
    spec.optimizer.kind = "adamw";
    spec.optimizer.lr = 5e-3;
    spec.seed = 2;
    spec.data = dataset_source(data, model, 16, 2);
    Pipeline pipeline(std::move(spec), make_work_sharing({.workers = 2}));
    const PipelineResult r = pipeline.run();
    ASSERT_EQ(r.losses.size(), 120u);
    const double first = mean(r.losses, 0, 10);
    const double last = mean(r.losses, 110, 120);
    // Measured first -> last: resnet50 1.94 -> 1.36 (Release), 1.84 -> 1.40 (ThreadSanitizer's
    // build sums in another order); inception_v3 1.40 -> 0.85.
    EXPECT_LT(last, first - 0.3) << name << ": first " << first << " last " << last;
  }
}

}  // namespace
}  // namespace tandem::actors
