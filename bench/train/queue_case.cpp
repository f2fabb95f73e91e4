// One case of trainpack_bench_train (main.cpp describes the benchmark and its options).
//
// Case `queue`, data that costs about as much as the step (1 intra-op thread, so that on 2 cores
// the prefetch thread has a core of its own): a MapData whose function busy-computes on the CPU
// for about one step time (calibrated at start), over the same batches:
//   (s) the step alone (bare loop, 1 thread), (t) the data alone (the map function in a loop),
//   (c) a bare loop producing each batch inline, then stepping (the two costs add up),
//   (d) SimpleTrainer + FeedInput (the same, plus the framework),
//   (e) SimpleTrainer + QueueInput (the data is produced on the prefetch thread meanwhile).

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support.h"
#include "train/common.h"
#include "trainpack/input/dataflow.h"

namespace trainpack::bench {

namespace {

// (t): the data function alone.
Run run_data_alone(int64_t steps, int64_t busy_iterations) {
  const Counters c0 = Counters::now();
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) busy(busy_iterations);
  const auto end = Clock::now();
  return make_run(start, end, c0, Counters::now(), steps);
}

}  // namespace

void run_queue_case(const Setup& setup, Results& results) {
  const auto& steps_per_epoch = setup.steps_per_epoch;
  const auto& reps = setup.reps;
  const auto& queue_steps = setup.queue_steps;
  const auto& queue_epochs = setup.queue_epochs;
  const auto& batches = setup.batches;
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
  results.add("feed_over_inline", feed.median_rate() / inline_bare.median_rate());
  results.add("queue_over_slower", queue.median_rate() / slower);
  std::fflush(stdout);
}

}  // namespace trainpack::bench
