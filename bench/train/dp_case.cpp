// One case of trainpack_bench_train (main.cpp describes the benchmark and its options).
//
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

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support.h"
#include "train/common.h"
#include "trainpack/callbacks/inference_runner.h"
#include "trainpack/input/input_source.h"
#include "trainpack/train/defaults.h"

namespace trainpack::bench {

namespace {

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
  ScratchLoggerDir dir("trainpack_bench_train");
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

}  // namespace

void run_dp_case(const Setup& setup, Results& results) {
  const auto& reps = setup.reps;
  const auto& threads = setup.threads;
  const auto& val_batches = setup.val_batches;
  const auto& val_batch_size = setup.val_batch_size;
  const auto& dp_passes = setup.dp_passes;
  const auto& val = setup.val;
  const auto& list = setup.list;
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
  results.add("dp2_over_dp1_speedup", d1->series.seconds() / d2->series.seconds());
  if (const Form* rt = form("(rT)")) {
    results.add("dp2_over_runner_threads_speedup", rt->series.seconds() / d2->series.seconds());
  }
  std::fflush(stdout);
}

}  // namespace trainpack::bench
