#pragma once
// Tandem's embedding API: the header an application includes, and with the public headers it
// includes (tandem/device.hpp, dtype.hpp, tensor.hpp, kernels.hpp, layer.hpp, all in this
// folder) the only interface Tandem promises to keep (within a minor version; see
// docs/embedding.md). None of them includes anything of Tandem's internals.
//
// A run: build a Model (a zoo model, or a classifier from layers of your own), describe the
// pipeline as a Plan (stages of layers, devices per replica, schedule), give it data through a
// DataFn, and run a Session; metrics arrive through a callback, and Session::stop() ends the
// run early from any thread.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "device.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "kernels.hpp"
#include "layer.hpp"
#include "tensor.hpp"

namespace tandem {

namespace models {
class Model;
}
struct Weights;

// "0.1.0": the version of the library the application runs against.
std::string_view version();

// The library's log lines (a fallback taken, a rank's connection trouble, an elastic job's door)
// go to stderr unless routed: set_log_handler sends every line to `handler` instead, on the
// thread that logs it, one call at a time (keep it short; it must not call into Tandem). An
// empty handler restores stderr. The application's own logging (spdlog's default logger
// included) is left alone.
enum class LogLevel { debug, info, warn, error };
void set_log_handler(std::function<void(LogLevel level, std::string_view message)> handler);

// ---------------------------------------------------------------------------------------------
// Layers: a custom layer derives from tandem::Layer (tandem/layer.hpp, which states the
// contract) and computes through the kernels its context carries (tandem/kernels.hpp).

// Built-in layers, for models that mix them with custom ones.
namespace layers {

using Activation = tandem::Activation;

// y = act(x W^T + b) over the last dimension ([..., in] -> [..., out]).
LayerPtr linear(std::int64_t in, std::int64_t out, Activation act = Activation::none,
                bool bias = true);
LayerPtr relu();
LayerPtr gelu();
// Over the last dimension, with a learned scale and shift.
LayerPtr layer_norm(std::int64_t features);
// Inverted dropout with probability p; `salt` tells apart the masks of different dropout layers.
LayerPtr dropout(float p, std::uint64_t salt);

// The layers that merge, for graph models (Model::graph): they read several tensors of one
// batch, so they run only inside a model (their Layer calls throw std::logic_error).
// The element-wise sum of `inputs` (>= 2) tensors of one shape (a residual).
LayerPtr add(int inputs = 2);
// The element-wise product of two tensors of one shape (a gate).
LayerPtr multiply();
// Tensors joined along the last dimension, whose sizes are `widths` (one per input, >= 2).
LayerPtr concat(std::vector<std::int64_t> widths);

// Token ids i32 [batch, length] -> f32 [batch, length, dim]: a learned vector per token of
// [0, vocab) plus one per position (length <= max_seq).
LayerPtr embedding(std::int64_t vocab, std::int64_t dim, std::int64_t max_seq);
// [batch, ...] -> [batch, d1 * d2 * ...].
LayerPtr flatten();
// [batch, ...] -> [batch, shape...], as many elements per sample.
LayerPtr reshape(std::vector<std::int64_t> shape);

}  // namespace layers

// ---------------------------------------------------------------------------------------------
// Models: a flat list of layers followed by a loss on the last layer's output: softmax
// cross-entropy on logits unless with_loss picks another. The plan's stages cut the list. Copies
// share the layers.

struct GptOptions {
  std::int64_t layers = 2;  // transformer blocks
  std::int64_t d_model = 64;
  std::int64_t heads = 4;
  std::int64_t seq_len = 32;
  std::int64_t vocab = 64;
  std::int64_t d_ff = 0;  // 0: 4 * d_model
  float dropout = 0.0f;
  // The head reuses the token embedding: its weight ("<layers + 2>.weight") is tied to
  // "0.tokens" (Model::tie).
  bool tie_embeddings = false;
};

// A tensor with a name: a weight ("<layer index>.<parameter>", e.g. "3.weight") or a model input.
struct NamedTensor {
  std::string name;
  Tensor value;
};

// A named input of a graph model: one sample's shape and its dtype (f32, or i32 token ids).
struct ModelInput {
  std::string name;
  std::vector<std::int64_t> shape;
  DType dtype = DType::f32;
};

// One node of a graph model: a layer and the names of what it reads (the model input's name or
// an earlier node's; empty: the node before, the input for the first).
struct GraphNode {
  std::string name;
  LayerPtr layer;
  std::vector<std::string> inputs;
};

class Model {
 public:
  // Linear+ReLU hidden layers between widths.front() input features and widths.back() classes.
  // Inputs f32 [batch, widths.front()], targets i32 [batch] (class ids).
  static Model mlp(std::vector<std::int64_t> widths);
  // Decoder-only transformer: embedding, `layers` blocks, final LayerNorm, linear head (layers
  // + 3 entries in the list). Inputs and targets i32 [batch, seq_len] (token ids).
  static Model gpt(const GptOptions& options);
  // Any layers, custom ones included, classifying feature vectors: inputs f32 [batch,
  // in_features], targets i32 [batch] (class ids), the last layer's output [batch, classes].
  // Throws std::invalid_argument naming the layer whose output_shape refuses its input, or a
  // null layer, or an output that is not [batch, classes].
  static Model classifier(std::int64_t in_features, std::vector<LayerPtr> layers);
  // A graph of layers, custom ones included, in the order stage cuts follow: each node reads the
  // model input (`input_name`, one sample of `input_shape`) or earlier nodes, so a tensor may
  // skip stages (it travels straight to the stage that reads it). Classifies as `classifier`
  // does: inputs f32 [batch, input_shape...], targets i32 [batch], the last node's output
  // [batch, classes]. The same graph as a config's `model: {input, graph}` (docs/config.md).
  // Throws std::invalid_argument naming the node for an unknown or later input, a duplicate
  // name, a layer refusing what it reads, or an output no node reads.
  static Model graph(std::vector<std::int64_t> input_shape, std::vector<GraphNode> nodes,
                     std::string input_name = "input");
  // A graph reading several named inputs (a sequence-to-sequence model's source and decoder
  // input): each node names the inputs it reads. Two or more inputs travel as one model input,
  // packed per sample in declaration order (pack_inputs makes it), in their common dtype (f32
  // where f32 and i32 mix: ids below 2^24 in magnitude travel as exact floats);
  // a node reading an input gets its values in its declared shape. The last node's output may
  // be of any shape the loss takes (cross-entropy: [batch, ..., classes], targets i32 [batch,
  // ...]). The same graph as a config's `model: {inputs, graph}` (docs/config.md).
  static Model graph(std::vector<ModelInput> inputs, std::vector<GraphNode> nodes);
  // The model input of a graph from tensors named after its inputs, each [batch, shape...] of
  // its dtype on the CPU. Throws std::invalid_argument naming the input and the shapes (or the
  // dtype) where one does not fit, and a name missing, unknown or given twice.
  Tensor pack_inputs(const std::vector<NamedTensor>& named) const;

  int num_layers() const;
  // Layer i: the application's own object for a custom layer; for a built-in one a Layer that
  // runs it (through Tandem's kernels only: a LayerContext with kernels of its own is refused).
  const Layer& layer(int i) const;  // throws std::out_of_range
  std::string describe() const;     // one line per layer
  std::int64_t parameters() const;  // number of trainable values
  Shape input_shape(std::int64_t batch) const;
  DType input_dtype() const;
  Shape target_shape(std::int64_t batch) const;  // the loss's, for the model's output
  DType target_dtype() const;                    // i32 for cross_entropy, else f32

  // This model under another loss (its layers shared): "cross_entropy", "mse" (mean squared
  // error) or "bce_with_logits" (binary cross-entropy of logits against probabilities in
  // [0, 1]); the latter two take f32 targets of the output's shape and report no accuracy.
  // Throws std::invalid_argument for another name.
  Model with_loss(std::string_view loss) const;
  // ... or the application's own loss (tandem/layer.hpp); throws std::invalid_argument for a
  // null one.
  Model with_loss(LossPtr loss) const;

  // This model with the parameters `names` tied (its layers shared): one value the layers
  // naming them share, as a config's model.tie (docs/config.md, "Tied parameters"). Names are
  // "<layer index>.<parameter>" ("0.tokens", "4.weight"), or for a graph model also
  // "<node>.<parameter>" ("h9.weight"). Every copy starts from the first's initialisation (the
  // leader: the lowest layer's), every update moves them alike, and checkpoints and weights
  // files store the leader only. Call it once per tied parameter. Throws std::invalid_argument
  // naming the tie for fewer than two names, an unknown parameter, one tied already, or shapes
  // that differ.
  Model tie(const std::vector<std::string>& names) const;
  // The tied parameters, one list per tie with the leader first ("<layer index>.<parameter>").
  std::vector<std::vector<std::string>> ties() const;

 private:
  friend class Session;
  friend Weights load_weights(const std::string& path, const Model& model);
  friend void save_weights(const std::string& path, const Weights& weights, const Model& model);
  Model(std::shared_ptr<const models::Model> impl, std::string title);
  std::shared_ptr<const models::Model> impl_;
  std::vector<LayerPtr> layers_;  // impl_'s layers as public ones (layer(i))
  std::string title_;             // describe()'s first line
};

// ---------------------------------------------------------------------------------------------
// Plans: which layers each stage runs, on which devices its replicas run, and the schedule.

enum class Schedule {
  naive,            // one slice at a time through the whole pipeline
  gpipe,            // all forwards, then all backwards, then one update per minibatch
  one_f_one_b,      // 1F1B with a flush per minibatch (PipeDream-Flush)
  pipedream,        // asynchronous 1F1B with weight stashing (whole minibatches, no flush)
  pipedream_vsync,  // asynchronous 1F1B with vertical sync
  pipedream_2bw,    // double-buffered weights, no flush
  interleaved,      // 1F1B over `chunks` model chunks per device
  zb_h1,            // zero bubble H1: backward split into input and weight gradients
  zb_v,             // zero bubble V: two chunks per device in V order (chunks = 2)
  zb_2p,            // zero bubble at twice 1F1B's activations
  umpipe,           // UMPIPE with equal slices
  // A config's `schedule: auto`: before the run, every schedule that can run the plan's stages
  // is timed by the planner's simulator on the model's FLOP counts (free links between the
  // devices) and the fastest runs, with its chunks, re-materialization and, where `slices` is 1,
  // its slice count; TrainResult::schedule says which. Asynchronous schedules take part only
  // with Plan::allow_async. `chunks`, `rematerialize` and `compositions` stay at their defaults.
  automatic,
};

// Names as in Tandem's configs: "gpipe", "1f1b", "pipedream", "2bw", ..., "auto".
std::string_view to_string(Schedule schedule);

struct Stage {
  int begin = 0;  // layers [begin, end) of the model
  int end = 0;
  // One device per replica: Device::cpu() or Device::cuda(N) (a CUDA build).
  std::vector<Device> devices{Device::cpu()};
  // The process (rank) of each replica in a job of several processes (a config's
  // pipeline.stages[i].ranks); empty: placed by the default rule (docs/multi-process.md).
  std::vector<int> ranks{};
};

// UMPIPE's unequal slices of one stage: the samples of each forward and of each backward slice,
// in order, each list summing to the minibatch (a config's per-stage `slices: {forward,
// backward}`).
struct SliceSizes {
  std::vector<std::int64_t> forward{}, backward{};
};

// How an asynchronous schedule's stage corrects for its gradients' delay (a config's
// pipeline.async_correction; docs/training.md).
enum class AsyncCorrection { none, weight_prediction, nesterov };

struct Plan {
  std::vector<Stage> stages;
  Schedule schedule = Schedule::one_f_one_b;
  std::int64_t minibatch = 0;  // samples per minibatch (>= 1)
  // Slices (micro-batches) per minibatch; PipeDream and vertical sync take whole minibatches.
  int slices = 1;
  int chunks = 1;              // interleaved: model chunks per device; zb_v: 2
  bool rematerialize = false;  // gpipe: recompute a stage's forward before its backward
  // umpipe: each stage's unequal slices, one per stage, instead of `slices`.
  std::vector<SliceSizes> compositions{};
  // A graph's tensors that skip stages: relayed by every stage in between instead of sent
  // straight to the stage that reads them (a config's pipeline.skip_edges: relay).
  bool relay_skips = false;
  // pipedream, pipedream_vsync and pipedream_2bw only.
  AsyncCorrection async_correction = AsyncCorrection::none;
  // Schedule::automatic only: rank the asynchronous schedules too (a config's allow_async).
  bool allow_async = false;

  // `stages` stages of as equal layer counts as can be (the first ones take the remainder),
  // one cpu replica each.
  static Plan split_evenly(const Model& model, int stages, Schedule schedule,
                           std::int64_t minibatch, int slices = 1);
};

// ---------------------------------------------------------------------------------------------
// Data: minibatch b's inputs and targets, on the CPU, in the model's input_shape(minibatch) and
// input_dtype() (targets: target_shape and target_dtype, i32 class ids for cross_entropy, f32
// for the other losses). Called on Tandem's loader thread, once per
// minibatch in increasing order, ahead of the stages; it must not block on the run's progress.
struct Batch {
  Tensor inputs;
  Tensor targets;
};
using DataFn = std::function<Batch(std::int64_t minibatch)>;
// A DataFn that can be interrupted: `stop` is stopped when the run is asked to stop
// (Session::stop(), Run::stop()) while this call fetches a minibatch the run will not train on.
// The callback may then return an empty Batch{} at once, declining the minibatch, instead of
// finishing I/O the run no longer waits for; the run ends before it. A minibatch the stop point
// still needs (an asynchronous schedule stops at a multiple of its replica counts) never gets a
// stopped token, and an empty Batch without a stop is an error.
using StoppableDataFn = std::function<Batch(std::int64_t minibatch, std::stop_token stop)>;

// ---------------------------------------------------------------------------------------------
// Training.

// The optimizers, by their options as libtorch's torch::optim names them: the type says which
// (a config's train.optimizer.kind).
struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;  // L2 added to the gradient
  bool nesterov = false;      // with momentum > 0
};
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled from the gradient
};
using Optimizer = std::variant<SgdOptions, AdamWOptions>;

// The learning rate over a run (a config's train.lr_schedule): a linear warm-up from 0 over
// `warmup_steps`, then constant, or a cosine or linear decay to final_fraction * lr at the end.
struct LrSchedule {
  enum class Kind { constant, cosine, linear };
  Kind kind = Kind::constant;
  std::int64_t warmup_steps = 0;
  double final_fraction = 0.0;
};

// How every stage runs matrix products (a config's train.precision): f32, or operands rounded
// to tf32 or bf16 with f32 accumulation (cuda: every GEMM; cpu: bf16 Linear layers through
// oneDNN where the CPU has bf16 instructions). Weights, gradients and optimizer state stay f32.
enum class Precision { f32, tf32, bf16 };

// How the processes of a multi-process job talk (a config's cluster section; docs/config.md).
struct ClusterOptions {
  enum class Transport { automatic, tcp, ucx };
  enum class Collectives { automatic, gloo, nccl };
  Transport transport = Transport::automatic;        // the data plane between processes
  Collectives collectives = Collectives::automatic;  // replicas' gradient reduction
  int tcp_lanes = 2;                                 // TCP streams per pair of processes, 1-8
  // Seconds a rank may hold work without completing any before the job ends naming it.
  double stall_timeout_s = 300;
  // A lost rank (not rank 0): the others re-plan onto themselves and resume from the last
  // checkpoint, at most max_replans times; off, a lost rank ends the job.
  bool elastic = false;
  int max_replans = 2;
};

// One minibatch, as soon as its loss is complete.
struct Metrics {
  std::int64_t minibatch = 0;
  double loss = 0;           // mean over the minibatch
  std::int64_t correct = 0;  // classification: correct predictions (argmax == target)
  std::int64_t rows = 0;     // predictions the loss averages over
  double elapsed_s = 0;      // since run() started
  // The update's gradient norm before clipping (runs that clip: TrainOptions::clip_grad_norm,
  // train.clip_grad_norm).
  bool has_grad_norm = false;
  double grad_norm = 0;
};

// Held-out results: the mean loss and accuracy over the held-out samples.
struct EvalReport {
  double loss = 0;      // mean over the predictions
  double accuracy = 0;  // share of correct predictions
  std::int64_t samples = 0;
  // Whether accuracy means anything: a classification under a loss that classifies (mse,
  // bce_with_logits and an application's loss do not).
  bool has_accuracy = true;
};

// ---------------------------------------------------------------------------------------------
// What every run may do besides training: checkpoints, held-out evaluation, progress.

// Checkpoints into `dir`: every `every` steps (0: only at the end) and at the end, keeping the
// newest `keep` of the run's lineage (0: all). The files are `tandem train --checkpoint`'s:
// either front end resumes what the other wrote. A checkpoint resumes only where the plan can
// stop (PipeDream with replicas: after a multiple of the replica counts' least common multiple,
// 2 for replicas 2-1-1): an `every` or a run length that is not such a step is refused when the
// Session is made, naming the nearest that are.
struct CheckpointOptions {
  std::string dir;  // empty: no checkpoints
  std::int64_t every = 0;
  int keep = 2;
};

// One log point (every train.log_every steps, at each evaluation and after the last step):
// the means over the steps since the previous one.
struct Progress {
  std::int64_t step = 0;   // steps done
  std::int64_t steps = 0;  // of the run
  double loss = 0;
  bool has_accuracy = false;  // classification
  double accuracy = 0;
  double samples_per_s = 0;
  double elapsed_s = 0;
  double lr = 0;
  // The gradient norm before clipping of the window's last step (runs that clip).
  bool has_grad_norm = false;
  double grad_norm = 0;
  bool has_eval = false;  // the held-out data was evaluated at this step
  EvalReport eval;
};

class ThreadBudget;

// Threads that sessions share. A Session otherwise runs its stages on workers of its own
// (TrainOptions::threads; 0: one per hardware thread), so two sessions at once would each take
// every core. Sessions given the same Runtime run their stages' work on at most threads()
// threads together, taking turns a handful of messages at a time, and their cpu stages' kernels
// split threads() instead of the machine's cores. A handle: copies share the threads, and it may
// be dropped before the sessions that use it.
class Runtime {
 public:
  // `threads` >= 1 (std::invalid_argument otherwise).
  explicit Runtime(std::size_t threads);
  std::size_t threads() const;
  // The most of its threads that ran stage work at the same moment, so far.
  std::size_t peak_threads_in_use() const;

 private:
  friend struct RuntimeAccess;
  std::shared_ptr<ThreadBudget> budget_;
};

// How a Session takes part in a job of several processes, said explicitly: a service that only
// runs inside a launcher's environment (a Slurm step, a torchrun worker) does not join a job
// unasked. The default is local().
class Launch {
 public:
  enum class Kind { local, environment, rank };
  // This process alone, whatever the environment holds.
  static Launch local() { return Launch(); }
  // As a launcher's variables say (tandem launch, torchrun, mpirun, srun:
  // docs/multi-process.md): rank R of N when they describe a job of several processes, alone
  // when they describe none.
  static Launch from_environment();
  // Rank `rank` of `world_size` processes whose rank 0 listens at `master` ("host:port",
  // "[v6]:port"), each given the job's `token` (a connection without it is refused; a master
  // that is not a loopback address needs one). Checked when the Session is made:
  // std::invalid_argument names what is wrong.
  static Launch rank(int rank, int world_size, std::string master, std::string token = "");

  Kind kind() const { return kind_; }
  int rank_index() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& master() const { return master_; }
  const std::string& token() const { return token_; }

 private:
  Kind kind_ = Kind::local;
  int rank_ = 0;
  int world_size_ = 1;
  std::string master_, token_;
};

// A YAML config (docs/config.md) for a Session: a file, or text given in code, with any key
// overridden from code. Each override replaces (or adds) one key's value before the config is
// read, in the order given, so an overridden key is checked as the file's own keys are; an error
// in one names it ("override train.steps:1:1: train.steps: must be >= 1"). `tandem train CONFIG
// --set KEY=VALUE` is the same from the command line.
class Config {
 public:
  static Config file(std::string path);
  // `name` stands for the text in errors ("<config text>:3:7: ..."); relative paths in the text
  // resolve against the working directory.
  static Config text(std::string yaml, std::string name = "<config text>");

  // Sets `key`, dotted with list indices ("train.steps", "pipeline.stages[1].replicas"), to
  // `yaml`, a YAML value ("200", "[0, 1]", "{kind: adamw, lr: 1e-3}"), adding the key (and the
  // mappings above it) where the config lacks it. A key set twice is refused when the Session
  // reads the config, as is a malformed key or value (ErrorCode::config, where().key the key).
  Config& set(std::string key, std::string yaml);
  Config& set(std::string key, const char* yaml) { return set(std::move(key), std::string(yaml)); }
  Config& set(std::string key, bool value);
  // Numbers, written exactly (a double in its shortest form that reads back the same).
  template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) Config& set(std::string key,
                                                                          T value) {
    return set(std::move(key), std::to_string(value));
  }
  Config& set(std::string key, double value);

  bool is_file() const { return is_file_; }
  // The file's path, or the text.
  const std::string& source() const { return source_; }
  // The file's path, or the text's name.
  const std::string& name() const { return name_; }
  // (key, YAML value), in the order set.
  const std::vector<std::pair<std::string, std::string>>& overrides() const { return overrides_; }

 private:
  Config(bool is_file, std::string source, std::string name);
  bool is_file_ = true;
  std::string source_, name_;
  std::vector<std::pair<std::string, std::string>> overrides_;
};

// Runs configured from a YAML config (docs/config.md), the ones `tandem train CONFIG` runs: the
// same steps, the same files, the same losses and weights bit for bit.
struct ConfigRunOptions {
  // Launch::from_environment() makes this process a rank of the job a launcher started, as
  // `tandem train` is; the default runs it alone.
  Launch launch;
  std::int64_t steps = 0;  // 0: the config's train.steps
  CheckpointOptions checkpoints;
  std::string resume;  // a checkpoint directory to continue from; empty: a fresh run
  // Weights for Session::predict instead of the session's own: a checkpoint directory (its newest
  // checkpoint, finished or not) or a whole-model file (save_weights, `tandem checkpoint
  // export`). Checked against the config's model when the session is built.
  std::string weights;
  // A Chrome trace of the run (of its first segment when checkpointing); a multi-process job's
  // rank 0 writes one trace of every rank's stages. Empty: none.
  std::string trace;
  // Called on one of Tandem's threads, in step order, on rank 0 only, never while another
  // call of it runs (serialised). Keep it short; it may call Session::stop().
  std::function<void(const Progress&)> on_progress;
  // Threads shared with other sessions (Runtime); none: the session's own, one per hardware
  // thread.
  std::optional<Runtime> runtime{};
};

// The data a YAML config describes, for a session built in code: minibatch b of the training
// set exactly as `tandem train` feeds it (train.minibatch samples, drawn by train.seed), and the
// held-out set (train.eval.samples) in whole minibatches. Throws std::invalid_argument naming
// "file:line:column: key" for a config problem.
struct ConfigData {
  std::int64_t minibatch = 0;
  DataFn data;
  DataFn eval;  // empty without train.eval
  std::int64_t eval_minibatches = 0;
};
ConfigData config_data(const Config& config);
ConfigData config_data(const std::string& config_file);  // config_data(Config::file(config_file))

struct TrainOptions {
  // As ConfigRunOptions::launch: alone unless asked otherwise.
  Launch launch;
  Plan plan;
  std::int64_t minibatches = 1;  // the run's length (2BW: batches); stop() may end it earlier
  Optimizer optimizer;
  // The learning rate over the run; or `lr_at`, the learning rate of update round k (one round
  // per minibatch), which replaces it.
  LrSchedule lr_schedule{};
  std::function<double(std::int64_t round)> lr_at;
  Precision precision = Precision::f32;
  ClusterOptions cluster{};
  std::uint64_t seed = 0;  // initial weights and dropout masks
  // The training data: `data`, or `stoppable_data` (one of the two).
  DataFn data;
  StoppableDataFn stoppable_data{};
  // Called on one of Tandem's threads as each minibatch's loss completes; with replicas or
  // asynchronous schedules not necessarily in minibatch order. Serialised with on_progress:
  // never two calls of either at once. Keep it short; it may call Session::stop().
  std::function<void(const Metrics&)> on_metrics;
  std::size_t threads = 0;  // worker threads running the stages; 0: one per hardware thread
  // Threads shared with other sessions; with it, `threads` 0 means the runtime's threads().
  std::optional<Runtime> runtime{};
  // As ConfigRunOptions: checkpoints (the model is recorded by its name, describe()'s first
  // line, and every layer's line, which a resume must match: a zoo model's are a config's), a
  // checkpoint to continue from, a trace.
  CheckpointOptions checkpoints;
  std::string resume;
  std::string trace;
  // A whole-model file (`tandem checkpoint export`) of this model to start from instead of
  // initialising from `seed`; empty: none. A `resume` takes precedence.
  std::string init_from;
  // Held-out evaluation: `eval_data` gives minibatch k of the held-out set (k below
  // `eval_minibatches`, in the training data's layout), evaluated every `eval_every`
  // minibatches (0: after the last only) on the weights of that step, and after the last.
  DataFn eval_data;
  std::int64_t eval_minibatches = 0;
  std::int64_t eval_every = 0;
  // Every `log_every` minibatches (and at each evaluation and the end), in minibatch order,
  // serialised with on_metrics.
  std::function<void(const Progress&)> on_progress;
  std::int64_t log_every = 10;
  // Gradient accumulation: each update takes `accumulate` minibatches (`data` is asked for
  // minibatches b * accumulate to b * accumulate + accumulate - 1 for update b) and averages
  // loss and gradients over all their samples once, as one device does on a minibatch that many
  // times larger; `minibatches`, Metrics and Progress count updates. Not with pipedream or
  // pipedream-vsync, which update after every minibatch.
  std::int64_t accumulate = 1;
  // Scale each update's gradients down to this global L2 norm (PyTorch's clip_grad_norm_; a
  // flush schedule's norm spans every stage and replica and equals one device's bit for bit; an
  // asynchronous schedule clips each stage by its own). 0: no clipping.
  double clip_grad_norm = 0;
};

struct StageReport {
  int stage = 0;
  int replica = 0;
  std::string device;
  std::int64_t actions = 0;           // forwards, backwards, updates, ... it ran
  double busy_s = 0;                  // time its device computed
  std::int64_t peak_versions = 0;     // weight versions kept at once
  std::int64_t peak_activations = 0;  // forward slices kept for backward at once
};

// How a run ended.
enum class RunStatus {
  completed,  // every minibatch of its length ran
  stopped,    // stop() ended it before its planned length, at a point every stage agrees on
  failed,     // it failed: the TrainResult is an Error's partial() (what ran before)
};

struct TrainResult {
  RunStatus status = RunStatus::completed;
  // The schedule that ran and its slices per minibatch (0: UMPIPE's unequal slices): the plan's,
  // or Schedule::automatic's pick.
  Schedule schedule = Schedule::one_f_one_b;
  int slices = 1;
  std::int64_t minibatches = 0;  // that ran: all of them, or fewer after stop() or a failure
  std::vector<double> losses;    // mean loss of every minibatch that ran, in order
  double seconds = 0;
  std::vector<StageReport> stages;  // by stage, then replica
  // A run resumed from a checkpoint starts at its step: losses[i] is minibatch
  // first_minibatch + i.
  std::int64_t first_minibatch = 0;
  // When the checkpoint resumed was written under another plan: one line saying how it was laid
  // out on this one (stashed versions mapped, or a fresh start of the schedule); else empty.
  std::string resume_note;
  // The checkpoint directories written, in order (CheckpointOptions).
  std::vector<std::string> checkpoints;
  // A multi-process job (a run under a launcher's variables): this process's rank and the
  // job's size. Rank 0's result covers the whole job (every stage, the held-out results); the other
  // ranks' cover the stages they ran.
  int rank = 0;
  int processes = 1;
  bool has_eval = false;  // eval holds the held-out results after the last step (rank 0)
  EvalReport eval;
  // A fingerprint of the trained weights, the one `tandem train` prints ("parameters
  // fingerprint"): equal fingerprints, bit-identical weights.
  std::uint64_t weights_fingerprint = 0;
};

// A whole model's weights as one file holds them: the safetensors file `tandem checkpoint
// export` writes and `train.init_from` (TrainOptions::init_from) reads.
struct Weights {
  // The model they belong to, as checkpoints record it (Session::model_name()); a run started
  // from the file must have the same.
  std::string model;
  std::int64_t step = 0;  // the updates the weights had
  std::vector<NamedTensor> tensors;
};

// Reads a whole-model file. Throws std::invalid_argument naming the file and what is wrong (not
// a Tandem model file, a malformed header, a tensor's bytes out of bounds, ...).
Weights load_weights(const std::string& path);
// Writes one, atomically (a temporary file renamed). Throws std::invalid_argument naming the
// tensor for duplicate or empty names; std::runtime_error naming the path when it cannot be
// written.
void save_weights(const std::string& path, const Weights& weights);
// With the model the weights belong to: every parameter of `model`, checked against it, each
// tied parameter's copies (Model::tie) filled from the file's one copy (in the model's order).
// Throws std::invalid_argument naming the file and the tensor for a missing parameter, one that
// is no parameter of the model or of another shape, or a tied copy the file holds that differs
// from the copy it is tied to (bit for bit).
Weights load_weights(const std::string& path, const Model& model);
// Stores each tied parameter of `model` once (its leader's name); the weights must be the
// model's (all its parameters, as Session::weights() gives them), and a tied parameter's copies
// equal. Throws std::invalid_argument naming the tensor otherwise.
void save_weights(const std::string& path, const Weights& weights, const Model& model);

struct PredictOptions {
  // Slices the inputs are cut into, pipelined across the stages and spread over a stage's
  // replicas; 0: the plan's slice count (at least the largest replica count). At most the rows.
  int slices = 0;
};

class Session;

// A run started by Session::start(), to wait on from any thread. It must not outlive its
// Session; copies share the run.
class Run {
 public:
  // Blocks until the run ends: its result, or the tandem::Error it failed with (as run()).
  TrainResult wait() const;
  // Waits at most `timeout`; whether the run has ended (wait() then returns at once).
  bool wait_for(std::chrono::milliseconds timeout) const;
  // As Session::stop(): the run ends at its next stop boundary; wait() then returns it.
  void stop() const;

 private:
  friend class Session;
  struct State;
  explicit Run(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// One training run. Not copyable or movable: stop() may be called on it from other threads.
class Session {
 public:
  // Checks everything before anything runs and throws tandem::Error naming what is wrong:
  // ErrorCode::plan for stages that overlap, leave gaps or run past the model, an unknown device
  // or a schedule that cannot run the plan; config for a missing DataFn or an unknown optimizer
  // (where().key names the option); checkpoint for one that cannot resume this run. With
  // options.launch a rank of a job (as for a config's job below), this process joins the job as its
  // rank: rank 0 runs the DataFn and reports, the others run their stages.
  Session(Model model, TrainOptions options);
  // The job the YAML config describes. With options.launch a rank of a job
  // (Launch::from_environment() under tandem launch, torchrun, mpirun, srun:
  // docs/multi-process.md) this process joins the job as its rank and runs the stages placed
  // there; rank 0 runs the loader, reports and checkpoints.
  // Throws tandem::Error: ErrorCode::config naming "file:line:column: key" (the key also in
  // where().key), checkpoint for one that cannot resume this config, lost_rank for a failed
  // join.
  explicit Session(Config config, ConfigRunOptions options = {});
  // Session(Config::file(config_file), options).
  explicit Session(const std::string& config_file, ConfigRunOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Trains; blocks until the run ends, returning how it ended (completed, or stopped). A run that
  // fails throws tandem::Error whose partial() holds the minibatches that ran and the
  // checkpoints written: ErrorCode::layer naming the stage, replica and minibatch of a layer's
  // exception, data for the DataFn's, diverged, lost_rank, stalled (error.hpp). Throws
  // std::logic_error when called a second time.
  TrainResult run();

  // run() on a thread of its own, returning at once: the Run waits for it (wait(), wait_for())
  // and stops it. Once per Session, instead of run(); a Session destroyed while its run goes on
  // stops it and waits for it. Callbacks (on_progress, on_metrics, the DataFn) run on the
  // library's threads as they do under run().
  Run start();

  // From any thread, before or during run(): the run ends cleanly at the first point after the
  // minibatches already in flight where every stage has applied the same updates (flush
  // schedules: any minibatch; asynchronous ones: a multiple of the least common multiple of the
  // stages' replica counts). Those complete, none after starts; stopped before run(), the run
  // runs none. Idempotent; no effect after the run. Must not race with the destructor.
  void stop();

  // After run(): the trained weights of the whole model (replica 0 of each stage). In a
  // multi-process job rank 0 holds the whole model's (the other ranks send it theirs as the run
  // ends); every other rank holds only the stages it ran. Throws std::logic_error before run(),
  // tandem::Error (ErrorCode::stopped) after a run that failed.
  std::vector<NamedTensor> weights() const;

  // The model's outputs for `inputs` (the model's input layout, [N, ...]; f32 features or i32
  // tokens), rows in input order, computed by the forward-only pipeline on this session's plan
  // (its stages, replicas and devices): with ConfigRunOptions::weights when given, else the
  // session's weights (initial, or resumed, or after run() the trained ones). Equal to the
  // model's evaluation forward (no dropout) on those weights over the same slices, bit for bit
  // on the CPU (over the whole batch at once: to rounding). Not while run() runs; in one process
  // only. Throws tandem::Error: ErrorCode::data naming the tensor for inputs that do not fit the
  // model; layer naming the stage for a failed forward.
  Tensor predict(const Tensor& inputs, const PredictOptions& options = {}) const;

  // What checkpoints and whole-model files record as the model (Weights::model).
  std::string model_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
