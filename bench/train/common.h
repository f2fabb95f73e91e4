// What the cases of trainpack_bench_train share: the model, the data, the counters and timed runs,
// the bare loop and the trainer forms, and the rows they print. main.cpp describes the benchmark.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "trainpack/callbacks/inference.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/train/single_cost.h"

namespace trainpack::bench {

using Clock = std::chrono::steady_clock;

// ---- the model ----

// Cloneable, so that DataParallelInferenceRunner can replicate it; reset() builds the layers in
// the same order as plain members would, so the initial weights are the same.
struct NetImpl : torch::nn::Cloneable<NetImpl> {
  NetImpl() { reset(); }
  void reset() override;
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

constexpr double kLr = 0.01;

// A fresh model with the same initial weights every time (so every form does the same work).
Net make_net();

// ---- the settings and the data every case gets ----

struct Setup {
  int64_t steps = 1200;  // case train, a whole number of epochs (as the two below)
  int64_t steps_per_epoch = 300;
  int64_t reps = 5;
  int64_t threads = 2;
  int64_t batch_size = 64;
  int64_t queue_steps = 400;
  int64_t val_steps = 600;
  int64_t val_batches = 40;
  int64_t val_batch_size = 128;
  int64_t dp_passes = 3;
  int64_t epochs = 0;  // steps / steps_per_epoch, and so on
  int64_t queue_epochs = 0;
  int64_t val_epochs = 0;
  std::vector<Datapoint> batches;      // the training batches
  std::vector<Datapoint> val;          // the validation set
  std::shared_ptr<DataFromList> list;  // over `batches`
};

// The key=value lines, printed together at the end, trainer_over_bare last.
struct Results {
  std::vector<std::string> lines;
  std::optional<double> trainer_over_bare;
  void add(const char* key, double value);
};

// The cases, each in its own file.
void run_train_case(const Setup& setup, Results& results);
void run_queue_case(const Setup& setup, Results& results);
void run_validation_case(const Setup& setup, Results& results);
void run_dp_case(const Setup& setup, Results& results);

// ---- counters and timed runs ----

// Process-wide (every thread): operator new calls, minor page faults, CPU time.
struct Counters {
  uint64_t news = 0;
  long minflt = 0;
  double cpu_seconds = 0;
  static Counters now();
};

// One timed run of a form (in case `dp`: one validation pass, `steps` = its batches).
struct Run {
  double seconds = 0;
  int64_t steps = 0;
  double news_per_step = 0;
  double faults_per_step = 0;
  double cores = 0;         // CPU time / wall time: the cores the process actually got
  double epoch_end_ms = 0;  // the epoch-end work (trainer forms) or the evaluation ((v)), per epoch
  double rate() const { return static_cast<double>(steps) / seconds; }
};

Run make_run(Clock::time_point start, Clock::time_point end, Counters c0, Counters c1,
             int64_t steps);

// The runs of one form over the reps, and their medians.
struct Series {
  std::vector<Run> runs;
  double median_rate() const;
  double max_rate() const;
  double news() const { return median_of(&Run::news_per_step); }
  double faults() const { return median_of(&Run::faults_per_step); }
  double cores() const { return median_of(&Run::cores); }
  double epoch_end_ms() const { return median_of(&Run::epoch_end_ms); }
  double seconds() const { return median_of(&Run::seconds); }
  double min_seconds() const;
  double median_of(double Run::*field) const;
};

void print_header();
void print_row(const char* label, const Series& s);

// ---- the data ----

std::vector<Datapoint> make_batches(int64_t count, int64_t batch_size, uint64_t seed);

// CPU work that takes a time proportional to `iterations` and that the compiler must keep.
void busy(int64_t iterations);

// ---- the bare loops: (a), (s), (c), (v) ----

// What a validation round computed: ScalarStats' mean of the batch costs, ClassificationError's
// errors over samples.
struct ValStats {
  double error = std::nan("");
  double cost = std::nan("");
};

// `busy_iterations` > 0: produce each batch inline first (form (c)). `val` not null: evaluate on
// it after every `steps_per_epoch` steps (form (v)); `stats` gets the last round's result.
Run run_bare(const std::vector<Datapoint>& batches, int64_t steps, int64_t busy_iterations = 0,
             const std::vector<Datapoint>* val = nullptr, int64_t steps_per_epoch = 0,
             ValStats* stats = nullptr);

// ---- SimpleTrainer: (b), (d), (e), (w) and case dp ----

// The intra-op thread count each inference tower saw (at::get_num_threads() on the thread that
// runs it), by tower name. Towers run on several threads at once in case dp, hence the lock (one
// uncontended lock per batch, next to milliseconds of convolution).
class ThreadProbe {
 public:
  void record(const std::string& tower);
  // "InferenceTower0=1 InferenceTower1=1"
  std::string describe() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, int> threads_;
};

InputSignature signature();
std::function<std::unique_ptr<torch::optim::Optimizer>()> sgd_for(Net net);
void exit_on_signal(const SimpleTrainer& trainer);

// The tower of cases validation and dp: the module from the context (replicas run it too); in
// training exactly the work of the bare loop; for inference also "cost" and "wrong" (1 per
// misclassified sample) for ScalarStats and ClassificationError. `probe` (may be null) records
// the intra-op threads of every inference tower.
TowerFunc validation_tower(std::shared_ptr<ThreadProbe> probe);
std::vector<InferencerPtr> validation_inferencers();
ValStats latest_val_stats(const SimpleTrainer& trainer);

enum class Input { kFeed, kQueue };

// (b), (d), (e); with `val` not null, (w): the runner on `val` at every epoch end, whose last
// round's result goes to `stats`.
Run run_trainer(const DataFlowPtr& data, Input input, int64_t steps_per_epoch, int64_t epochs,
                const std::vector<Datapoint>* val = nullptr, ValStats* stats = nullptr);

}  // namespace trainpack::bench
