// One case of trainpack_bench_train (main.cpp describes the benchmark and its options).
//
// Case `train`, the framework against a bare loop (`--threads` intra-op threads, default 2):
//   (a) a hand-written LibTorch loop: forward, cross_entropy, zero_grad, backward, step;
//   (b) SimpleTrainer with DEFAULT_CALLBACKS() and DEFAULT_MONITORS() (logging into a fresh
//       temporary directory, so TFEventWriter and JSONWriter write real files), the tower
//       publishing one moving summary (ctx.add_moving_summary("cost", cost)), FeedInput over a
//       DataFromList of the same batches.

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support.h"
#include "train/common.h"

namespace trainpack::bench {

void run_train_case(const Setup& setup, Results& results) {
  const auto& steps = setup.steps;
  const auto& steps_per_epoch = setup.steps_per_epoch;
  const auto& reps = setup.reps;
  const auto& threads = setup.threads;
  const auto& batch_size = setup.batch_size;
  const auto& epochs = setup.epochs;
  const auto& batches = setup.batches;
  const auto& list = setup.list;
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
  results.trainer_over_bare = trainer.median_rate() / bare.median_rate();
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

}  // namespace trainpack::bench
