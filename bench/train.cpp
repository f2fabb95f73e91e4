// trainpack_bench_train: what the trainer costs on a real (small) training step, whether
// QueueInput hides the cost of the data, what validation with InferenceRunner costs, and what
// DataParallelInferenceRunner gains with two CPU replicas.
//
// The model is a small CNN (conv 1->8 3x3, relu, maxpool 2, conv 8->16 3x3, relu, maxpool 2,
// linear 784->10) trained with SGD on Fashion-MNIST-shaped batches ([B, 1, 28, 28] float, [B]
// int64 labels) generated once, in memory, before anything is timed. The validation set is made
// the same way (other random values): `--val-batches` batches of `--val-batch-size`.
//
// Case `train`, the framework against a bare loop (`--threads` intra-op threads, default 2):
//   (a) a hand-written LibTorch loop: forward, cross_entropy, zero_grad, backward, step;
//   (b) SimpleTrainer with DEFAULT_CALLBACKS() and DEFAULT_MONITORS() (logging into a fresh
//       temporary directory, so TFEventWriter and JSONWriter write real files), the tower
//       publishing one moving summary (ctx.add_moving_summary("cost", cost)), FeedInput over a
//       DataFromList of the same batches.
// Case `queue`, data that costs about as much as the step (1 intra-op thread, so that on 2 cores
// the prefetch thread has a core of its own): a MapData whose function busy-computes on the CPU
// for about one step time (calibrated at start), over the same batches:
//   (s) the step alone (bare loop, 1 thread), (t) the data alone (the map function in a loop),
//   (c) a bare loop producing each batch inline, then stepping (the two costs add up),
//   (d) SimpleTrainer + FeedInput (the same, plus the framework),
//   (e) SimpleTrainer + QueueInput (the data is produced on the prefetch thread meanwhile).
// Case `validation`, the same training with a validation round at every epoch end (`--threads`
// intra-op threads, `--val-steps` steps per run in epochs of `--steps-per-epoch`):
//   (v) bare: loop (a), and after each epoch's last step a hand-written evaluation that does
//       what InferenceRunner does: module.eval(), NoGradGuard, for every validation batch the
//       same forward and cross_entropy, the batch's cost as a double (ScalarStats: the mean over
//       batches) and its number of wrong arg-maxes (ClassificationError: errors / samples over
//       the whole set), then module.train();
//   (w) SimpleTrainer + defaults + FeedInput as (b), plus InferenceRunner(DataFromList of the
//       validation batches, {ScalarStats({"cost"}), ClassificationError("wrong", "val-error")})
//       with its default options (every epoch, progress bar on). The tower takes its module from
//       the context and outputs "cost" and "wrong" only when it runs for inference, so the
//       training step does exactly the work of (a).
//   Both print the last round's val-error and validation cost: they must be equal.
// Case `dp`, one validation pass over the same set (no training timed), inside a SimpleTrainer
// that runs one training step per epoch and the runner at every epoch end; the pass is timed
// from the callback before the runner to the callback after it, the first epoch's pass is a
// warm-up. Forms (the runner, and torch::set_num_threads before the run; T = `--threads`):
//   (r1) InferenceRunner, 1 thread: 1 replica x 1 thread;
//   (rT) InferenceRunner, T threads: 1 replica x T threads;
//   (d1) DataParallelInferenceRunner({kCPU}), 1 thread: 1 replica x 1 thread;
//   (d2) DataParallelInferenceRunner({kCPU, kCPU}), 1 thread: 2 replicas x 1 thread;
//   (d2T) DataParallelInferenceRunner({kCPU, kCPU}), T threads: what a training job that keeps
//        its T threads and adds a second CPU replica gets.
//   The second replica runs on a thread the runner starts, where ATen takes the process-wide
//   setting at its first parallel operation (at::internal::lazy_init_num_threads); the runner
//   lowers that setting to T / replicas during a parallel round, so each replica of (d2T) gets 1
//   on 2 cores (before that, each got T: 2 x 2 threads on 2 cores). The table shows
//   the count the tower function saw on each replica (at::get_num_threads() inside it),
//   measured, not assumed. (rT) and (d2T) are left out with `--threads 1`. The statistics
//   of (r1), (d1) and (d2) (same weights, 1 thread) must be equal.
//
// Timing: steady_clock. A trainer form is timed from the first epoch's before_epoch to the last
// epoch's trigger_epoch, seen by a monitor registered after every other callback: all steps and
// all epoch-end work (summaries, stats.json, event-file flush, the validation round) are inside,
// the setup (building the optimizer, creating the files, starting the thread) and after_train are
// not. After a warm-up run of every form, the forms run interleaved in every rep ((a), (b), (a),
// (b), ...) so that drift in the machine's speed hits them alike; the median rate over the reps
// is reported. Also printed (medians over the reps): operator new calls and minor page faults per
// step, which show what the framework allocates per step on top of LibTorch's own work, `cores`,
// the process's CPU time over the wall time (process-wide counters), and the epoch-end work per
// epoch (trainer forms: from the end of the epoch's last step to the end of its trigger_epoch:
// summaries, stats.json, the event file's flush and fsync, and in (w) the validation round; (v):
// its evaluation). In case `queue`, (e) can reach the slower rate only with `cores` near 2: on a
// machine whose other core is busy with other work, the prefetch thread has nowhere to run and
// (e) falls back to the sum of the two costs. The same holds for (d2) in case `dp`.
//
// The allocator (`--malloc`, default `tuned`): with glibc's default settings, whether a step's
// activation buffers are returned to the OS and faulted back in at the next step depends on the
// heap's layout, which differs from one form to the other and from run to run (measured here:
// 30 or 1,000 minor faults per step for the same form, and up to 20% of the step time), so it
// would be measured instead of the framework. `tuned` fixes the thresholds before anything is
// allocated, mallopt(M_MMAP_THRESHOLD, 32 MiB) and mallopt(M_TRIM_THRESHOLD, 256 MiB): buffers
// stay in the heap and no form faults per step. `default` leaves glibc alone.
//
// OpenBLAS (`--blas-threads`, default 1, as the main job): LibTorch's BLAS calls (the linear
// layer) go to OpenBLAS, whose pthread build keeps its own pool of one thread per core, spinning
// for a while after every call. On 2 cores that pool takes the core that a second replica, the
// prefetch thread or ATen's second intra-op thread needs: measured here in case dp, (d2) over
// (d1) went from 1.10 to 1.88 with 1 OpenBLAS thread, and (r1) used 2.00 cores instead of 1.00.
// `--blas-threads N` calls openblas_set_num_threads(N) (looked up with dlsym; ignored, with a
// note, when the BLAS is not OpenBLAS); 0 leaves OpenBLAS's own setting. The issue-4 figures in
// BENCHMARKS.md were taken before this setting existed, with OpenBLAS's own.
//
// Last lines, for the cases run (`--only` picks the cases, comma-separated, default all four, run
// in the order train, queue, validation, dp; `--skip-queue` drops `queue`), in this order:
//   feed_over_inline=<rate (d) / rate (c)>
//   queue_over_slower=<rate (e) / min(rate (s), rate (t))>   (target >= 0.9)
//   validation_over_bare=<rate (w) / rate (v)>               (target >= 0.99)
//   dp2_over_dp1_speedup=<time (d1) / time (d2)>             (2 CPU replicas against one)
//   dp2_over_runner_threads_speedup=<time (rT) / time (d2)>  (against one replica with T threads)
//   trainer_over_bare=<rate (b) / rate (a)>                  (target >= 0.99)
// so that trainer_over_bare is the very last line whenever `train` runs (the default run).
//
//   trainpack_bench_train [--only train,queue,validation,dp] [--steps N] [--steps-per-epoch M]
//                         [--reps R] [--threads T] [--batch-size B] [--queue-steps Q]
//                         [--skip-queue] [--val-steps V] [--val-batches K]
//                         [--val-batch-size VB] [--dp-passes P] [--blas-threads N]
//                         [--malloc tuned|default]
//   Defaults: --steps 1200 --steps-per-epoch 300 --reps 5 --threads 2 --batch-size 64
//   --queue-steps 400 --val-steps 600 --val-batches 40 --val-batch-size 128 --dp-passes 3
//   --blas-threads 1 --malloc tuned. On 2 cores the default run takes about 5.5 minutes (train
//   1.3, queue 2.6, validation 1.0, dp 0.6); `--only validation,dp` (issue 5's figures) about
//   1.6. Progress bars go to stderr.
#include <torch/torch.h>

#include <dlfcn.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "trainpack/callbacks/inference.h"
#include "trainpack/callbacks/inference_runner.h"
#include "trainpack/callbacks/monitor_base.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/train/defaults.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/logger.h"

// ---- operator new, counted (process-wide, relaxed: a count, not a synchronisation) ----

namespace {
std::atomic<uint64_t> g_news{0};
}  // namespace

// noinline: inlined into a caller, GCC 12 takes the free() for a mismatched deallocation of the
// pointer from `new` (-Wmismatched-new-delete).
__attribute__((noinline)) void* operator new(std::size_t size) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using Clock = std::chrono::steady_clock;
using trainpack::Datapoint;

// ---- the model ----

// Cloneable, so that DataParallelInferenceRunner can replicate it; reset() builds the layers in
// the same order as plain members would, so the initial weights are the same.
struct NetImpl : torch::nn::Cloneable<NetImpl> {
  NetImpl() { reset(); }
  void reset() override {
    conv1 =
        register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)));
    conv2 =
        register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(16 * 7 * 7, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    return fc->forward(x.flatten(1));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

constexpr double kLr = 0.01;

// A fresh model with the same initial weights every time (so every form does the same work).
Net make_net() {
  torch::manual_seed(1);
  return Net();
}

// ---- counters ----

// Process-wide (every thread): operator new calls, minor page faults, CPU time.
struct Counters {
  uint64_t news = 0;
  long minflt = 0;
  double cpu_seconds = 0;
  static Counters now() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& tv) {
      return static_cast<double>(tv.tv_sec) + 1e-6 * static_cast<double>(tv.tv_usec);
    };
    return {g_news.load(std::memory_order_relaxed), usage.ru_minflt,
            seconds(usage.ru_utime) + seconds(usage.ru_stime)};
  }
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
             int64_t steps) {
  Run r;
  r.seconds = std::chrono::duration<double>(end - start).count();
  r.steps = steps;
  r.news_per_step = static_cast<double>(c1.news - c0.news) / static_cast<double>(steps);
  r.faults_per_step = static_cast<double>(c1.minflt - c0.minflt) / static_cast<double>(steps);
  r.cores = (c1.cpu_seconds - c0.cpu_seconds) / r.seconds;
  return r;
}

// ---- the data ----

std::vector<Datapoint> make_batches(int64_t count, int64_t batch_size, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<Datapoint> batches;
  for (int64_t i = 0; i < count; ++i) {
    batches.push_back(
        {torch::rand({batch_size, 1, 28, 28}), torch::randint(10, {batch_size}, torch::kLong)});
  }
  return batches;
}

// CPU work that takes a time proportional to `iterations` and that the compiler must keep.
volatile double g_sink = 0;
void busy(int64_t iterations) {
  double x = 1.0;
  for (int64_t i = 0; i < iterations; ++i) x = std::sqrt(x + static_cast<double>(i & 1023));
  g_sink = x;
}

// ---- (a), (s), (c), (v): bare loops ----

// What a validation round computed: ScalarStats' mean of the batch costs, ClassificationError's
// errors over samples.
struct ValStats {
  double error = std::nan("");
  double cost = std::nan("");
};

// The hand-written counterpart of InferenceRunner + {ScalarStats, ClassificationError}.
ValStats evaluate_bare(Net& net, const std::vector<Datapoint>& val) {
  net->eval();
  torch::NoGradGuard no_grad;
  double cost_sum = 0;
  double wrong = 0;
  int64_t total = 0;
  for (const Datapoint& batch : val) {
    torch::Tensor logits = net->forward(batch[0]);
    cost_sum += torch::nn::functional::cross_entropy(logits, batch[1]).item<double>();
    torch::Tensor w = logits.argmax(1).ne(batch[1]).to(torch::kFloat);
    wrong += w.sum().item<double>();
    total += w.size(0);
  }
  net->train();
  return {total == 0 ? 0.0 : wrong / static_cast<double>(total),
          cost_sum / static_cast<double>(val.size())};
}

// `busy_iterations` > 0: produce each batch inline first (form (c)). `val` not null: evaluate on
// it after every `steps_per_epoch` steps (form (v)); `stats` gets the last round's result.
Run run_bare(const std::vector<Datapoint>& batches, int64_t steps, int64_t busy_iterations = 0,
             const std::vector<Datapoint>* val = nullptr, int64_t steps_per_epoch = 0,
             ValStats* stats = nullptr) {
  Net net = make_net();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(kLr));
  double eval_seconds = 0;
  int64_t rounds = 0;
  const Counters c0 = Counters::now();
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    const Datapoint& batch = batches[static_cast<size_t>(i) % batches.size()];
    if (busy_iterations > 0) busy(busy_iterations);
    torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(batch[0]), batch[1]);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (val != nullptr && (i + 1) % steps_per_epoch == 0) {
      const auto t0 = Clock::now();
      const ValStats s = evaluate_bare(net, *val);
      eval_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      ++rounds;
      if (stats != nullptr) *stats = s;
    }
  }
  const auto end = Clock::now();
  Run run = make_run(start, end, c0, Counters::now(), steps);
  if (rounds > 0) run.epoch_end_ms = 1e3 * eval_seconds / static_cast<double>(rounds);
  return run;
}

// (t): the data function alone.
Run run_data_alone(int64_t steps, int64_t busy_iterations) {
  const Counters c0 = Counters::now();
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) busy(busy_iterations);
  const auto end = Clock::now();
  return make_run(start, end, c0, Counters::now(), steps);
}

// ---- (b), (d), (e), (w) and case dp: SimpleTrainer ----

// Registered as the last monitor, so after every callback: its before_epoch of the first epoch
// comes right before the first step, its trigger_epoch after all of an epoch's end work.
// It also adds up the time from the end of each epoch's last step (its trigger_step, after every
// callback's) to the end of the epoch's work (its trigger_epoch): the epoch-end cost.
class LoopTimer : public trainpack::MonitorBase {
 public:
  Clock::time_point start, end;
  Counters c_start, c_end;
  double epoch_end_seconds = 0;

 protected:
  void _before_epoch() override {
    if (epoch_num() == 1) {
      c_start = Counters::now();
      start = Clock::now();
    }
  }
  void _trigger_step() override {
    if (local_step() == trainer().steps_per_epoch() - 1) last_step_end_ = Clock::now();
  }
  void _trigger_epoch() override {
    end = Clock::now();
    c_end = Counters::now();
    epoch_end_seconds += std::chrono::duration<double>(end - last_step_end_).count();
  }

 private:
  Clock::time_point last_step_end_;
};

// Case dp: the callbacks right before and right after the runner time its round.
struct PassTimes {
  Clock::time_point start;
  Counters c_start;
  int64_t batches = 0;
  std::vector<Run> passes;  // one per epoch, the first (warm-up) included
};

class PassStart : public trainpack::Callback {
 public:
  explicit PassStart(std::shared_ptr<PassTimes> times) : times_(std::move(times)) {}

 protected:
  void _trigger_epoch() override {
    times_->c_start = Counters::now();
    times_->start = Clock::now();
  }

 private:
  std::shared_ptr<PassTimes> times_;
};

class PassEnd : public trainpack::Callback {
 public:
  explicit PassEnd(std::shared_ptr<PassTimes> times) : times_(std::move(times)) {}

 protected:
  void _trigger_epoch() override {
    const auto end = Clock::now();
    times_->passes.push_back(
        make_run(times_->start, end, times_->c_start, Counters::now(), times_->batches));
  }

 private:
  std::shared_ptr<PassTimes> times_;
};

// The intra-op thread count each inference tower saw (at::get_num_threads() on the thread that
// runs it), by tower name. Towers run on several threads at once in case dp, hence the lock (one
// uncontended lock per batch, next to milliseconds of convolution).
class ThreadProbe {
 public:
  void record(const std::string& tower) {
    const int n = at::get_num_threads();
    std::lock_guard<std::mutex> lock(mutex_);
    int& seen = threads_[tower];
    seen = std::max(seen, n);
  }
  // "InferenceTower0=1 InferenceTower1=1"
  std::string describe() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::ostringstream out;
    for (const auto& [name, n] : threads_) out << (out.tellp() > 0 ? " " : "") << name << "=" << n;
    return out.str();
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, int> threads_;
};

// A fresh logger directory for one trainer run, removed afterwards.
class TempLogDir {
 public:
  TempLogDir() {
    char dir_template[] = "/tmp/trainpack_bench_train.XXXXXX";
    if (mkdtemp(dir_template) == nullptr) {
      std::perror("mkdtemp");
      std::exit(1);
    }
    dir_ = dir_template;
    trainpack::logger::set_logger_dir(dir_, 'k');
  }
  ~TempLogDir() {
    trainpack::logger::unset_logger_dir();
    std::filesystem::remove_all(dir_);
  }
  TempLogDir(const TempLogDir&) = delete;
  TempLogDir& operator=(const TempLogDir&) = delete;

 private:
  std::string dir_;
};

trainpack::InputSignature signature() {
  return {trainpack::InputDesc("image", {-1, 1, 28, 28}),
          trainpack::InputDesc("label", {-1}, at::kLong)};
}

std::function<std::unique_ptr<torch::optim::Optimizer>()> sgd_for(Net net) {
  return [net] {
    return std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(kLr));
  };
}

void exit_on_signal(const trainpack::SimpleTrainer& trainer) {
  if (trainer.received_signal() != 0) {
    std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
  }
}

// The tower of cases validation and dp: the module from the context (replicas run it too); in
// training exactly the work of the bare loop; for inference also "cost" and "wrong" (1 per
// misclassified sample) for ScalarStats and ClassificationError. `probe` (may be null) records
// the intra-op threads of every inference tower.
trainpack::TowerFunc validation_tower(std::shared_ptr<ThreadProbe> probe) {
  return [probe](trainpack::TowerContext& ctx, const std::vector<at::Tensor>& in) {
    auto& net = ctx.module_as<NetImpl>();
    torch::Tensor logits = net.forward(in[0]);
    torch::Tensor cost = torch::nn::functional::cross_entropy(logits, in[1]);
    if (ctx.is_main_training_tower()) ctx.add_moving_summary("cost", cost);
    if (!ctx.is_training()) {
      if (probe) probe->record(ctx.name());
      ctx.output("cost", cost);
      ctx.output("wrong", logits.argmax(1).ne(in[1]).to(torch::kFloat));
    }
    return cost;
  };
}

std::vector<trainpack::InferencerPtr> validation_inferencers() {
  return {std::make_shared<trainpack::ScalarStats>(std::vector<std::string>{"cost"}),
          std::make_shared<trainpack::ClassificationError>("wrong", "val-error")};
}

ValStats latest_val_stats(const trainpack::SimpleTrainer& trainer) {
  return {trainer.monitors().get_latest("val-error"),
          trainer.monitors().get_latest("validation_cost")};
}

enum class Input { kFeed, kQueue };

// (b), (d), (e); with `val` not null, (w): the runner on `val` at every epoch end, whose last
// round's result goes to `stats`.
Run run_trainer(const trainpack::DataFlowPtr& data, Input input, int64_t steps_per_epoch,
                int64_t epochs, const std::vector<Datapoint>* val = nullptr,
                ValStats* stats = nullptr) {
  TempLogDir dir;
  Net net = make_net();
  trainpack::SimpleTrainer trainer;
  trainpack::InputSourcePtr source;
  if (input == Input::kFeed) {
    source = std::make_shared<trainpack::FeedInput>(data);
  } else {
    source = std::make_shared<trainpack::QueueInput>(data);
  }
  trainpack::TowerFunc tower;
  std::vector<trainpack::CallbackPtr> callbacks;
  if (val == nullptr) {
    // Cases train and queue keep the tower they were measured with (issue 4).
    tower = [net](trainpack::TowerContext& ctx, const std::vector<at::Tensor>& in) mutable {
      torch::Tensor cost = torch::nn::functional::cross_entropy(net->forward(in[0]), in[1]);
      ctx.add_moving_summary("cost", cost);
      return cost;
    };
  } else {
    tower = validation_tower(nullptr);
    callbacks.push_back(std::make_shared<trainpack::InferenceRunner>(
        std::make_shared<trainpack::DataFromList>(*val), validation_inferencers()));
  }
  trainer.setup_graph(signature(), source, net.ptr(), tower, sgd_for(net));
  auto timer = std::make_shared<LoopTimer>();
  std::vector<trainpack::MonitorPtr> monitors = trainpack::DEFAULT_MONITORS();
  monitors.push_back(timer);
  trainer.train_with_defaults(trainpack::TrainOptions()
                                  .callbacks(callbacks)
                                  .monitors(monitors)
                                  .steps_per_epoch(steps_per_epoch)
                                  .max_epoch(epochs));
  exit_on_signal(trainer);
  Run run = make_run(timer->start, timer->end, timer->c_start, timer->c_end, trainer.global_step());
  run.epoch_end_ms = 1e3 * timer->epoch_end_seconds / static_cast<double>(epochs);
  if (stats != nullptr) *stats = latest_val_stats(trainer);
  return run;
}

// Case dp: one form. `devices` empty: InferenceRunner; else DataParallelInferenceRunner on them.
// `threads`: torch::set_num_threads before the run (the process-wide setting every replica
// takes). Returns the median pass over `passes` timed ones (after one warm-up pass).
struct EvalResult {
  Run pass;
  ValStats stats;
  std::string threads_seen;
};

EvalResult run_eval(const trainpack::DataFlowPtr& train_data, const std::vector<Datapoint>& val,
                    const std::vector<c10::Device>& devices, int64_t threads, int64_t passes) {
  torch::set_num_threads(static_cast<int>(threads));
  TempLogDir dir;
  Net net = make_net();
  auto probe = std::make_shared<ThreadProbe>();
  auto times = std::make_shared<PassTimes>();
  times->batches = static_cast<int64_t>(val.size());
  auto val_data = std::make_shared<trainpack::DataFromList>(val);
  trainpack::CallbackPtr runner;
  if (devices.empty()) {
    runner = std::make_shared<trainpack::InferenceRunner>(val_data, validation_inferencers());
  } else {
    runner = std::make_shared<trainpack::DataParallelInferenceRunner>(
        val_data, validation_inferencers(), devices);
  }
  trainpack::SimpleTrainer trainer;
  trainer.setup_graph(signature(), std::make_shared<trainpack::FeedInput>(train_data), net.ptr(),
                      validation_tower(probe), sgd_for(net));
  trainer.train_with_defaults(
      trainpack::TrainOptions()
          .callbacks({std::make_shared<PassStart>(times), runner, std::make_shared<PassEnd>(times)})
          .steps_per_epoch(1)
          .max_epoch(passes + 1));
  exit_on_signal(trainer);
  std::vector<Run> timed(times->passes.begin() + 1, times->passes.end());
  std::sort(timed.begin(), timed.end(),
            [](const Run& x, const Run& y) { return x.seconds < y.seconds; });
  return {timed[timed.size() / 2], latest_val_stats(trainer), probe->describe()};
}

// ---- statistics ----

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Series {
  std::vector<Run> runs;
  double median_rate() const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.rate());
    return median(v);
  }
  double max_rate() const {
    double m = 0;
    for (const auto& r : runs) m = std::max(m, r.rate());
    return m;
  }
  double news() const { return median_of(&Run::news_per_step); }
  double faults() const { return median_of(&Run::faults_per_step); }
  double cores() const { return median_of(&Run::cores); }
  double epoch_end_ms() const { return median_of(&Run::epoch_end_ms); }
  double seconds() const { return median_of(&Run::seconds); }
  double min_seconds() const {
    double m = runs.empty() ? 0 : runs[0].seconds;
    for (const auto& r : runs) m = std::min(m, r.seconds);
    return m;
  }
  double median_of(double Run::*field) const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.*field);
    return median(v);
  }
};

void print_row(const char* label, const Series& s) {
  std::printf("%-42s %9.2f %9.2f %9.1f %11.1f %6.2f %9.2f\n", label, s.median_rate(), s.max_rate(),
              s.news(), s.faults(), s.cores(), s.epoch_end_ms());
}

void print_header() {
  std::printf("%-42s %9s %9s %9s %11s %6s %9s\n", "form", "steps/s", "max", "new/step",
              "faults/step", "cores", "end ms/ep");
}

int64_t parse_positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "%s: expected a positive integer, got '%s'\n", flag, text);
    std::exit(2);
  }
  return static_cast<int64_t>(v);
}

void usage(std::FILE* out, const char* argv0) {
  std::fprintf(out,
               "usage: %s [--only train,queue,validation,dp (default: all)] [--steps N (default "
               "1200)] [--steps-per-epoch M (default 300)] [--reps R (default 5)] [--threads T "
               "(default 2)] [--batch-size B (default 64)] [--queue-steps Q (default 400)] "
               "[--skip-queue] [--val-steps V (default 600)] [--val-batches K (default 40)] "
               "[--val-batch-size VB (default 128)] [--dp-passes P (default 3)] [--blas-threads N "
               "(default 1; 0: OpenBLAS's own)] [--malloc tuned|default (default tuned)]\n",
               argv0);
}

// OpenBLAS's thread count (`threads` > 0: set it); returns what is in effect, for the output.
std::string set_blas_threads(int64_t threads) {
  // Not part of the BLAS interface LibTorch links against: looked up at run time.
  auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (get == nullptr || set == nullptr) return "BLAS not OpenBLAS (--blas-threads ignored)";
  if (threads > 0) set(static_cast<int>(threads));
  return "OpenBLAS threads " + std::to_string(get()) +
         (threads > 0 ? " (--blas-threads " + std::to_string(threads) + ")"
                      : std::string(" (its own setting, --blas-threads 0)"));
}

// Whole epochs: a step count rounded up to a multiple of the epoch; returns the epochs.
int64_t round_to_epochs(int64_t* steps, int64_t steps_per_epoch) {
  const int64_t epochs = (*steps + steps_per_epoch - 1) / steps_per_epoch;
  *steps = epochs * steps_per_epoch;
  return epochs;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 1200;
  int64_t steps_per_epoch = 300;
  int64_t reps = 5;
  int64_t threads = 2;
  int64_t batch_size = 64;
  int64_t queue_steps = 400;
  int64_t val_steps = 600;
  int64_t val_batches = 40;
  int64_t val_batch_size = 128;
  int64_t dp_passes = 3;
  int64_t blas_threads = 1;
  std::set<std::string> cases = {"train", "queue", "validation", "dp"};
  std::string malloc_mode = "tuned";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--skip-queue") {
      cases.erase("queue");
    } else if (arg == "--only" && i + 1 < argc) {
      cases.clear();
      std::istringstream list(argv[++i]);
      std::string name;
      while (std::getline(list, name, ',')) {
        if (name != "train" && name != "queue" && name != "validation" && name != "dp") {
          std::fprintf(stderr, "--only: unknown case '%s' (train, queue, validation, dp)\n",
                       name.c_str());
          return 2;
        }
        cases.insert(name);
      }
    } else if (arg == "--malloc" && i + 1 < argc) {
      malloc_mode = argv[++i];
      if (malloc_mode != "tuned" && malloc_mode != "default") {
        std::fprintf(stderr, "--malloc: expected 'tuned' or 'default', got '%s'\n",
                     malloc_mode.c_str());
        return 2;
      }
    } else if ((arg == "--steps" || arg == "--steps-per-epoch" || arg == "--reps" ||
                arg == "--threads" || arg == "--batch-size" || arg == "--queue-steps" ||
                arg == "--val-steps" || arg == "--val-batches" || arg == "--val-batch-size" ||
                arg == "--dp-passes" || arg == "--blas-threads") &&
               i + 1 < argc) {
      const std::string text = argv[++i];
      // --blas-threads 0 is allowed: OpenBLAS's own setting.
      const int64_t v =
          arg == "--blas-threads" && text == "0" ? 0 : parse_positive(arg.c_str(), text.c_str());
      if (arg == "--steps") steps = v;
      if (arg == "--steps-per-epoch") steps_per_epoch = v;
      if (arg == "--reps") reps = v;
      if (arg == "--threads") threads = v;
      if (arg == "--batch-size") batch_size = v;
      if (arg == "--queue-steps") queue_steps = v;
      if (arg == "--val-steps") val_steps = v;
      if (arg == "--val-batches") val_batches = v;
      if (arg == "--val-batch-size") val_batch_size = v;
      if (arg == "--dp-passes") dp_passes = v;
      if (arg == "--blas-threads") blas_threads = v;
    } else if (arg == "--help" || arg == "-h") {
      usage(stdout, argv[0]);
      return 0;
    } else {
      usage(stderr, argv[0]);
      return 2;
    }
  }
  if (malloc_mode == "tuned") {
    // Both calls also turn off glibc's dynamic threshold adjustment.
    if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 256 << 20) != 1) {
      std::fprintf(stderr, "mallopt failed; run with --malloc default\n");
      return 1;
    }
  }
  const std::string blas = set_blas_threads(blas_threads);
  const int64_t epochs = round_to_epochs(&steps, steps_per_epoch);
  const int64_t queue_epochs = round_to_epochs(&queue_steps, steps_per_epoch);
  const int64_t val_epochs = round_to_epochs(&val_steps, steps_per_epoch);

  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  const std::vector<Datapoint> batches = make_batches(16, batch_size, 0);
  const std::vector<Datapoint> val = make_batches(val_batches, val_batch_size, 2);
  auto list = std::make_shared<trainpack::DataFromList>(batches);
  // The key=value lines, printed together at the end (trainer_over_bare last).
  std::vector<std::string> results;
  auto result = [&results](const char* key, double value) {
    char line[128];
    std::snprintf(line, sizeof line, "%s=%.4f", key, value);
    results.emplace_back(line);
  };
  std::optional<double> trainer_over_bare;
  std::printf("trainpack_bench_train: cases");
  for (const char* c : {"train", "queue", "validation", "dp"}) {
    if (cases.count(c) != 0) std::printf(" %s", c);
  }
  std::printf(", %lld reps, malloc %s, %s\n", static_cast<long long>(reps), malloc_mode.c_str(),
              blas.c_str());

  // ---- case train ----
  if (cases.count("train") != 0) {
    torch::set_num_threads(static_cast<int>(threads));
    std::printf(
        "\ntrain case: CNN on [%lld, 1, 28, 28] batches, %lld intra-op threads, %lld "
        "steps (%lld epochs x %lld) per run\n",
        static_cast<long long>(batch_size), static_cast<long long>(torch::get_num_threads()),
        static_cast<long long>(steps), static_cast<long long>(epochs),
        static_cast<long long>(steps_per_epoch));
    std::fflush(stdout);
    run_bare(batches, steps_per_epoch);  // warm-up
    run_trainer(list, Input::kFeed, steps_per_epoch, 1);
    Series bare, trainer;
    std::vector<double> ratios;
    for (int64_t r = 0; r < reps; ++r) {
      bare.runs.push_back(run_bare(batches, steps));
      trainer.runs.push_back(run_trainer(list, Input::kFeed, steps_per_epoch, epochs));
      ratios.push_back(trainer.runs.back().rate() / bare.runs.back().rate());
      std::printf("rep %lld: (a) %.2f steps/s, (b) %.2f steps/s, (b)/(a) %.4f\n",
                  static_cast<long long>(r), bare.runs.back().rate(), trainer.runs.back().rate(),
                  ratios.back());
      std::fflush(stdout);
    }
    print_header();
    print_row("(a) bare LibTorch loop", bare);
    print_row("(b) SimpleTrainer + defaults + FeedInput", trainer);
    trainer_over_bare = trainer.median_rate() / bare.median_rate();
    std::printf("median of the per-rep ratios (b)/(a): %.4f\n", median(ratios));
    {
      // The same ratio with (b)'s epoch-end work taken out: what the per-step path costs.
      std::vector<double> step_rates;
      for (const auto& r : trainer.runs) {
        const double seconds = r.seconds - 1e-3 * r.epoch_end_ms * static_cast<double>(epochs);
        step_rates.push_back(static_cast<double>(r.steps) / seconds);
      }
      std::printf("(b) without its epoch-end work: %.2f steps/s, %.4f of (a)\n", median(step_rates),
                  median(step_rates) / bare.median_rate());
    }
    std::fflush(stdout);
  }

  // ---- case queue ----
  if (cases.count("queue") != 0) {
    torch::set_num_threads(1);
    std::printf(
        "\nqueue case: 1 intra-op thread (the prefetch thread gets the other core), %lld "
        "steps (%lld epochs x %lld) per run\n",
        static_cast<long long>(queue_steps), static_cast<long long>(queue_epochs),
        static_cast<long long>(steps_per_epoch));
    // Calibrate the data function to about one step time.
    run_bare(batches, steps_per_epoch);  // warm-up at 1 thread
    const double step_seconds = 1.0 / run_bare(batches, steps_per_epoch).rate();
    constexpr int64_t kProbe = 1 << 22;
    const auto t0 = Clock::now();
    busy(kProbe);
    const double probe_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const int64_t busy_iterations =
        std::max<int64_t>(1, static_cast<int64_t>(kProbe * step_seconds / probe_seconds));
    std::printf("step %.3f ms; data function: %lld sqrt iterations\n", 1e3 * step_seconds,
                static_cast<long long>(busy_iterations));

    auto mapped = std::make_shared<trainpack::MapData>(
        std::make_shared<trainpack::DataFromList>(batches),
        [busy_iterations](Datapoint dp) -> std::optional<Datapoint> {
          busy(busy_iterations);
          return dp;
        });
    run_trainer(mapped, Input::kFeed, steps_per_epoch, 1);  // warm-up
    run_trainer(mapped, Input::kQueue, steps_per_epoch, 1);
    Series step_alone, data_alone, inline_bare, feed, queue;
    for (int64_t r = 0; r < reps; ++r) {
      step_alone.runs.push_back(run_bare(batches, queue_steps));
      data_alone.runs.push_back(run_data_alone(queue_steps, busy_iterations));
      inline_bare.runs.push_back(run_bare(batches, queue_steps, busy_iterations));
      feed.runs.push_back(run_trainer(mapped, Input::kFeed, steps_per_epoch, queue_epochs));
      queue.runs.push_back(run_trainer(mapped, Input::kQueue, steps_per_epoch, queue_epochs));
      std::printf("rep %lld: (s) %.2f (t) %.2f (c) %.2f (d) %.2f (e) %.2f steps/s\n",
                  static_cast<long long>(r), step_alone.runs.back().rate(),
                  data_alone.runs.back().rate(), inline_bare.runs.back().rate(),
                  feed.runs.back().rate(), queue.runs.back().rate());
      std::fflush(stdout);
    }
    print_header();
    print_row("(s) step alone (bare, 1 thread)", step_alone);
    print_row("(t) data alone (map function)", data_alone);
    print_row("(c) bare loop, data inline", inline_bare);
    print_row("(d) SimpleTrainer + FeedInput", feed);
    print_row("(e) SimpleTrainer + QueueInput", queue);
    const double slower = std::min(step_alone.median_rate(), data_alone.median_rate());
    result("feed_over_inline", feed.median_rate() / inline_bare.median_rate());
    result("queue_over_slower", queue.median_rate() / slower);
    std::fflush(stdout);
  }

  // ---- case validation ----
  if (cases.count("validation") != 0) {
    torch::set_num_threads(static_cast<int>(threads));
    std::printf(
        "\nvalidation case: %lld intra-op threads, %lld steps (%lld epochs x %lld) per run, a "
        "validation round of %lld batches x %lld images after every epoch\n",
        static_cast<long long>(torch::get_num_threads()), static_cast<long long>(val_steps),
        static_cast<long long>(val_epochs), static_cast<long long>(steps_per_epoch),
        static_cast<long long>(val_batches), static_cast<long long>(val_batch_size));
    std::fflush(stdout);
    // Warm-up: one epoch each.
    run_bare(batches, steps_per_epoch, 0, &val, steps_per_epoch);
    run_trainer(list, Input::kFeed, steps_per_epoch, 1, &val);
    Series bare, trainer;
    ValStats bare_stats, trainer_stats;
    std::vector<double> ratios;
    for (int64_t r = 0; r < reps; ++r) {
      bare.runs.push_back(run_bare(batches, val_steps, 0, &val, steps_per_epoch, &bare_stats));
      trainer.runs.push_back(
          run_trainer(list, Input::kFeed, steps_per_epoch, val_epochs, &val, &trainer_stats));
      ratios.push_back(trainer.runs.back().rate() / bare.runs.back().rate());
      std::printf(
          "rep %lld: (v) %.2f steps/s (eval %.1f ms/epoch), (w) %.2f steps/s (epoch end %.1f "
          "ms), (w)/(v) %.4f\n",
          static_cast<long long>(r), bare.runs.back().rate(), bare.runs.back().epoch_end_ms,
          trainer.runs.back().rate(), trainer.runs.back().epoch_end_ms, ratios.back());
      std::fflush(stdout);
    }
    print_header();
    print_row("(v) bare loop + hand-written evaluation", bare);
    print_row("(w) trainer + defaults + InferenceRunner", trainer);
    std::printf("median of the per-rep ratios (w)/(v): %.4f\n", median(ratios));
    std::printf(
        "validation round (median, ms): (v) %.2f, (w) epoch-end work incl. the round %.2f, "
        "(w)/(v) %.4f\n",
        bare.epoch_end_ms(), trainer.epoch_end_ms(), trainer.epoch_end_ms() / bare.epoch_end_ms());
    const bool same = bare_stats.error == trainer_stats.error &&
                      std::abs(bare_stats.cost - trainer_stats.cost) <=
                          1e-9 * std::max(1.0, std::abs(bare_stats.cost));
    std::printf("last round: (v) val-error %.6f cost %.9f, (w) val-error %.6f cost %.9f (%s)\n",
                bare_stats.error, bare_stats.cost, trainer_stats.error, trainer_stats.cost,
                same ? "equal" : "DIFFERENT");
    result("validation_over_bare", trainer.median_rate() / bare.median_rate());
    std::fflush(stdout);
  }

  // ---- case dp ----
  if (cases.count("dp") != 0) {
    std::printf(
        "\ndp case: one validation pass of %lld batches x %lld images, median of %lld passes "
        "per run (after a warm-up pass), replicas x intra-op threads as in each form\n",
        static_cast<long long>(val_batches), static_cast<long long>(val_batch_size),
        static_cast<long long>(dp_passes));
    std::fflush(stdout);
    struct Form {
      const char* label;
      std::vector<c10::Device> devices;
      int64_t threads;
      Series series;
      EvalResult last;
    };
    const c10::Device cpu(c10::kCPU);
    std::vector<Form> forms;
    forms.push_back({"(r1) InferenceRunner, 1 thread", {}, 1, {}, {}});
    if (threads > 1) forms.push_back({"(rT) InferenceRunner, T threads", {}, threads, {}, {}});
    forms.push_back({"(d1) DataParallel {cpu}, 1 thread", {cpu}, 1, {}, {}});
    forms.push_back({"(d2) DataParallel {cpu, cpu}, 1 thread", {cpu, cpu}, 1, {}, {}});
    if (threads > 1) {
      forms.push_back({"(d2T) DataParallel {cpu, cpu}, T threads", {cpu, cpu}, threads, {}, {}});
    }
    for (auto& f : forms) run_eval(list, val, f.devices, f.threads, 1);  // warm-up
    for (int64_t r = 0; r < reps; ++r) {
      std::printf("rep %lld:", static_cast<long long>(r));
      for (auto& f : forms) {
        f.last = run_eval(list, val, f.devices, f.threads, dp_passes);
        f.series.runs.push_back(f.last.pass);
        std::printf(" %.1f", 1e3 * f.last.pass.seconds);
      }
      std::printf(" ms per pass\n");
      std::fflush(stdout);
    }
    std::printf("T = %lld\n%-46s %8s %8s %6s %10s %12s  %s\n", static_cast<long long>(threads),
                "form", "ms/pass", "min", "cores", "val-error", "cost",
                "intra-op threads per tower (measured)");
    for (const auto& f : forms) {
      std::printf("%-46s %8.1f %8.1f %6.2f %10.6f %12.9f  %s\n", f.label, 1e3 * f.series.seconds(),
                  1e3 * f.series.min_seconds(), f.series.cores(), f.last.stats.error,
                  f.last.stats.cost, f.last.threads_seen.c_str());
    }
    auto form = [&forms](const char* prefix) -> const Form* {
      for (const auto& f : forms) {
        if (std::string(f.label).rfind(prefix, 0) == 0) return &f;
      }
      return nullptr;
    };
    const Form* r1 = form("(r1)");
    const Form* d1 = form("(d1)");
    const Form* d2 = form("(d2)");
    // The same weights and 1 thread: the runners must agree exactly.
    const bool same = r1->last.stats.error == d1->last.stats.error &&
                      r1->last.stats.error == d2->last.stats.error &&
                      r1->last.stats.cost == d1->last.stats.cost &&
                      r1->last.stats.cost == d2->last.stats.cost;
    std::printf("(r1), (d1), (d2) statistics: %s\n", same ? "equal" : "DIFFERENT");
    result("dp2_over_dp1_speedup", d1->series.seconds() / d2->series.seconds());
    if (const Form* rt = form("(rT)")) {
      result("dp2_over_runner_threads_speedup", rt->series.seconds() / d2->series.seconds());
    }
    std::fflush(stdout);
  }

  std::printf("\n");
  for (const auto& line : results) std::printf("%s\n", line.c_str());
  if (trainer_over_bare) std::printf("trainer_over_bare=%.4f\n", *trainer_over_bare);
  return 0;
}
