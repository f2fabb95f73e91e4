// One case of trainpack_bench_train (main.cpp describes the benchmark and its options).
//
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

void run_validation_case(const Setup& setup, Results& results) {
  const auto& steps_per_epoch = setup.steps_per_epoch;
  const auto& reps = setup.reps;
  const auto& threads = setup.threads;
  const auto& val_steps = setup.val_steps;
  const auto& val_batches = setup.val_batches;
  const auto& val_batch_size = setup.val_batch_size;
  const auto& val_epochs = setup.val_epochs;
  const auto& batches = setup.batches;
  const auto& val = setup.val;
  const auto& list = setup.list;
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
  results.add("validation_over_bare", trainer.median_rate() / bare.median_rate());
  std::fflush(stdout);
}

}  // namespace trainpack::bench
