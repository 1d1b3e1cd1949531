// Embeds Tandem in an application: a model with a layer of our own (written once, through
// Tandem's kernel interface, for every device), a two-stage 1F1B pipeline written in code,
// generated data, metrics through a callback, and a watcher thread that stops the run once the
// loss has halved. Exits 0 only when that happened.
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <tandem/tandem.hpp>
#include <thread>
#include <vector>

namespace {

constexpr std::int64_t kFeatures = 16;
constexpr std::int64_t kHidden = 32;
constexpr std::int64_t kClasses = 4;
constexpr std::int64_t kMinibatch = 32;
constexpr std::int64_t kMaxMinibatches = 2000;  // the planned length; the watcher stops sooner
constexpr std::size_t kWindow = 20;             // minibatches the loss is averaged over

// The custom layer: a residual block y = x + relu(x W^T + b) over the last dimension ([batch,
// d] -> [batch, d]). It computes through the kernels of its context (tandem/kernels.hpp), so
// the same code runs on a cpu stage and on a cuda one. It keeps x and the block's activation
// h = relu(.) for backward (both one row per sample: SavedLayout::rows, the default, so the
// pipeline may slice them).
class ResidualBlock final : public tandem::Layer {
 public:
  explicit ResidualBlock(std::int64_t d) : d_(d) {}

  std::string kind() const override { return "residual"; }
  std::string describe() const override { return "residual(" + std::to_string(d_) + ")"; }
  std::vector<tandem::ParamSpec> param_specs() const override {
    return {{"weight", {d_, d_}, tandem::ParamInit::uniform_fan_in, 1.0f, d_},
            {"bias", {d_}, tandem::ParamInit::zeros}};
  }
  tandem::Shape output_shape(const tandem::Shape& input) const override {
    if (input.size() != 2 || input[1] != d_) {
      throw std::invalid_argument(describe() + ": input " + tandem::shape_str(input) +
                                  ", wants [batch, " + std::to_string(d_) + "]");
    }
    return input;
  }

  tandem::ForwardResult forward(const tandem::LayerContext& ctx, tandem::ParamView params,
                                const tandem::Tensor& x) const override {
    const tandem::Kernels& k = ctx.k();
    tandem::Tensor h = k.empty(x.shape());
    k.gemm(/*trans_a=*/false, /*trans_b=*/true, 1.0f, x, params[0], 0.0f, h);  // x W^T
    k.bias_activation(h, params[1], tandem::Activation::relu, nullptr);
    tandem::Tensor y = k.empty(x.shape());
    k.add(x, h, y);
    tandem::ForwardResult out{y, {}};
    if (ctx.keep_saved) out.saved = {x, h};
    return out;
  }

  // dx = dy + dz W, with dz = dy where h > 0.
  tandem::Tensor backward_input(const tandem::LayerContext& ctx, tandem::ParamView params,
                                tandem::Saved& saved, const tandem::Tensor& dy) const override {
    const tandem::Kernels& k = ctx.k();
    tandem::Tensor dz = k.empty(dy.shape());
    k.activation_backward(tandem::Activation::relu, dy, saved.at(1), dz);
    tandem::Tensor dx = k.empty(dy.shape());
    k.copy(dy, dx);
    k.gemm(false, false, 1.0f, dz, params[0], 1.0f, dx);  // + dz W
    return dx;
  }

  // dW = dz^T x, db = sum over rows of dz; written as grads = alpha * g + beta * grads, which
  // the kernels' alpha and beta do directly.
  void backward_weight_into(const tandem::LayerContext& ctx, const tandem::Saved& saved,
                            const tandem::Tensor& dy, const tandem::GradSink& sink) const override {
    const tandem::Kernels& k = ctx.k();
    tandem::Tensor dz = k.empty(dy.shape());
    k.bias_activation_backward(tandem::Activation::relu, dy, saved.at(1), dz, &sink.grads[1],
                               sink.alpha, sink.beta);
    k.gemm(true, false, sink.alpha, dz, saved.at(0), sink.beta, sink.grads[0]);
  }

 private:
  std::int64_t d_;
};

// Generated data: standard normal features, labelled by a fixed random linear teacher
// (argmax over classes). Minibatch b always holds the same samples.
class Teacher {
 public:
  Teacher() : w_(static_cast<std::size_t>(kClasses * kFeatures)) {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal;
    for (float& v : w_) v = normal(rng);
  }

  tandem::Batch batch(std::int64_t b) const {
    std::mt19937_64 rng(1000 + static_cast<std::uint64_t>(b));
    std::normal_distribution<float> normal;
    std::vector<float> x(static_cast<std::size_t>(kMinibatch * kFeatures));
    std::vector<std::int32_t> y(static_cast<std::size_t>(kMinibatch));
    for (float& v : x) v = normal(rng);
    for (std::int64_t r = 0; r < kMinibatch; ++r) {
      std::int32_t best = 0;
      float best_score = -1e30f;
      for (std::int32_t c = 0; c < kClasses; ++c) {
        float s = 0;
        for (std::int64_t i = 0; i < kFeatures; ++i) {
          s += w_[static_cast<std::size_t>(c * kFeatures + i)] *
               x[static_cast<std::size_t>(r * kFeatures + i)];
        }
        if (s > best_score) best_score = s, best = c;
      }
      y[static_cast<std::size_t>(r)] = best;
    }
    return {tandem::Tensor::from_vector(x, {kMinibatch, kFeatures}),
            tandem::Tensor::from_vector(y, {kMinibatch})};
  }

 private:
  std::vector<float> w_;
};

double mean(const std::deque<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

// Usage: embed_example [device], the device of both stages ("cpu", the default, or "cuda:0").
int main(int argc, char** argv) {
  const tandem::Device device = tandem::Device::parse(argc > 1 ? argv[1] : "cpu");
  std::printf("tandem %s\n", std::string(tandem::version()).c_str());

  // Five layers, two of them ours; stage 0 takes layers [0, 2), stage 1 [2, 5).
  const tandem::Model model = tandem::Model::classifier(
      kFeatures,
      {tandem::layers::linear(kFeatures, kHidden, tandem::layers::Activation::relu),
       std::make_shared<ResidualBlock>(kHidden), std::make_shared<ResidualBlock>(kHidden),
       tandem::layers::layer_norm(kHidden), tandem::layers::linear(kHidden, kClasses)});
  std::printf("%s", model.describe().c_str());

  tandem::Plan plan;
  plan.stages = {{.begin = 0, .end = 2, .devices = {device}},
                 {.begin = 2, .end = 5, .devices = {device}}};
  plan.schedule = tandem::Schedule::one_f_one_b;
  plan.minibatch = kMinibatch;
  plan.slices = 4;

  // The callback feeds the watcher: first-window loss, latest-window loss, and when the latest
  // fell below half the first.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<double> window;
  double first_window = 0, last_window = 0, reached_window = 0;
  std::int64_t seen = 0, reached_at = -1, seen_at_stop = -1;
  bool done = false;

  const Teacher teacher;
  tandem::TrainOptions options;
  options.plan = plan;
  options.minibatches = kMaxMinibatches;
  options.optimizer = tandem::SgdOptions{.lr = 0.05, .momentum = 0.9};
  options.seed = 1;
  options.data = [&teacher](std::int64_t b) { return teacher.batch(b); };
  options.on_metrics = [&](const tandem::Metrics& m) {
    std::lock_guard lock(mu);
    ++seen;
    window.push_back(m.loss);
    if (window.size() > kWindow) window.pop_front();
    if (window.size() < kWindow) return;
    if (seen == static_cast<std::int64_t>(kWindow)) first_window = mean(window);
    last_window = mean(window);
    if (seen % 10 == 0) {
      std::printf("minibatch %4lld  loss %.4f  (%.1f s)\n", static_cast<long long>(m.minibatch),
                  last_window, m.elapsed_s);
    }
    if (reached_at < 0 && last_window < 0.5 * first_window) {
      reached_at = m.minibatch;
      reached_window = last_window;
      cv.notify_all();
    }
  };

  tandem::Session session(model, std::move(options));
  // Another thread decides when to stop, as an application's control plane would.
  std::thread watcher([&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return reached_at >= 0 || done; });
    if (reached_at < 0) return;
    seen_at_stop = seen;
    lock.unlock();  // the callback must not wait for the stop
    session.stop();
  });
  const auto release_watcher = [&] {
    {
      std::lock_guard lock(mu);
      done = true;
    }
    cv.notify_all();
    watcher.join();
  };
  tandem::TrainResult result;
  try {
    result = session.run();
  } catch (const tandem::Error& e) {
    // The code tells the failures apart; partial() holds what ran before.
    release_watcher();
    std::fprintf(stderr, "embed_example: %s failure after %lld minibatches: %s\n",
                 std::string(tandem::error_code_name(e.code())).c_str(),
                 static_cast<long long>(e.partial() != nullptr ? e.partial()->minibatches : 0),
                 e.what());
    return 1;
  }
  release_watcher();

  std::printf(
      "mean loss of minibatches 0-%zu: %.4f; of the %zu before the stop request: %.4f; "
      "of the last %zu: %.4f\n",
      kWindow - 1, first_window, kWindow, reached_window, kWindow, last_window);
  std::printf(
      "loss halved at minibatch %lld; the watcher called stop() when %lld minibatches had "
      "reported; the run ended after %lld of %lld in %.2f s\n",
      static_cast<long long>(reached_at), static_cast<long long>(seen_at_stop),
      static_cast<long long>(result.minibatches), static_cast<long long>(kMaxMinibatches),
      result.seconds);
  for (const tandem::StageReport& s : result.stages) {
    std::printf("stage %d replica %d on %s: %lld actions, busy %.2f s\n", s.stage, s.replica,
                s.device.c_str(), static_cast<long long>(s.actions), s.busy_s);
  }
  std::printf("%zu weight tensors trained\n", session.weights().size());

  // The watcher's condition, and the run did not unlearn it in the minibatches after the stop.
  const bool learned =
      reached_at >= 0 && reached_window < 0.5 * first_window && last_window < 0.75 * first_window;
  const bool stopped = result.status == tandem::RunStatus::stopped &&
                       result.minibatches >= seen_at_stop &&
                       result.losses.size() == static_cast<std::size_t>(result.minibatches);
  if (!learned || !stopped) {
    std::fprintf(stderr, "embed_example: FAILED (%s)\n",
                 !learned ? "the loss did not halve" : "the run did not stop when asked");
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
