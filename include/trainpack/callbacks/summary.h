// Summary callbacks (tensorpack's callbacks/summary.py): they turn what the training tower
// records (TowerContext::summary_scalar/histogram/image, add_moving_summary) into monitor data.
// MovingAverageSummary updates the moving averages with every step; MergeAllSummaries puts the
// summaries at the last step of each epoch (`cost-summary` -> the scalar `cost`);
// SimpleMovingAverage puts means over a window of steps. (LearningRateSummary, which reads the
// optimizers instead, is in callbacks/learning_rate_summary.h, included below.)
// The tower registry holds only the current step's values (the trainer clears it after every
// hooked run), so they read it within that run. Under data-parallel training MovingAverageSummary
// and MergeAllSummaries run on every rank, and the scalars put are the mean over the ranks.
// See docs/summaries.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/callbacks/learning_rate_summary.h"  // LearningRateSummary, once declared here
#include "trainpack/core/callback.h"
#include "trainpack/utils/summary.h"

namespace trainpack {

class TowerRegistry;

// tensorpack's MovingAverageSummary: updates the moving averages of the training tower
// (TowerContext::add_moving_summary: an EMA with zero-debias, so the first average is x_1) with
// every hooked run, on each value's device, without a host sync; also runs the closures of the
// Graph collection `collection`. With a collection other than MOVING_SUMMARY_OPS only its closures
// run, and the tower's averages are left alone.
// When: before_run returns a request built at setup_graph; its op runs after the step function
// and before any after_run, so a MergeAllSummaries after it sees the updated average.
// Logs once, after the first hooked run: `[MovingAverageSummary] N operations in collection
// 'MOVING_SUMMARY_OPS' will be run with session hooks.` Without it no average is updated or put.
// State (checkpoints; default collection only): `biased/<name>`, `updates/<name>`, `decay/<name>`
// per average, so a resumed run puts the same averages. chief_only: true (runs on every rank).
// Errors: std::invalid_argument for an empty `collection`. Differences from tensorpack: the log
// line comes after the first step; no `train_op` argument; the averages are checkpointed.
class MovingAverageSummary : public Callback {
 public:
  explicit MovingAverageSummary(std::string collection = "MOVING_SUMMARY_OPS");

  const std::string& collection() const { return collection_; }

  // See "State" above. Both need setup_graph first (std::logic_error); load_state throws
  // std::invalid_argument naming the callback and the entry on a state that does not fit.
  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

 protected:
  void _setup_graph() override;
  RunArgs _before_run(const StepContext& ctx) override;

 private:
  void update();

  std::string collection_;
  bool tower_ = false;                                       // collection_ is MOVING_SUMMARY_OPS
  const std::vector<std::function<void()>>* ops_ = nullptr;  // the Graph collection
  RunArgs args_;  // built once in setup_graph: runs update() with the step
  bool logged_ = false;
};

// Options of MergeAllSummaries.
struct MergeAllSummariesOptions {
  // > 0: also materialise when (local_step + 1) % period == 0 (restarting every epoch).
  TORCH_ARG(int64_t, period) = 0;
  // false: materialise within the hooked run of the due step (MergeAllSummaries_RunWithOp).
  // true: keep what the due step recorded and put it at trigger (MergeAllSummaries_RunAlone).
  TORCH_ARG(bool, run_alone) = false;
  // The summary collection: "summaries" (Graph::kSummaries), the only key accepted.
  TORCH_ARG(std::string, key) = "summaries";
};

// What MergeAllSummaries puts: the summaries the training tower recorded in the current hooked
// run, in registry order (scalar: `<name>-summary`, read with .item(), a host sync; histogram:
// `<name>-histogram`; image: the first `max_outputs` images as uint8 PNGs, tagged `<name>/image`
// or `<name>/image/<k>`), then each moving average updated at least once (`<name>-summary`,
// debiased). Errors: std::invalid_argument naming `who` and the summary for an image that is not
// an image, or a NaN/infinite value in a histogram.
Summary merge_tower_summaries(const TowerRegistry& registry, const char* who = "MergeAllSummaries");

// The size of the summary collection, as tensorpack counts it: the summaries the tower has
// recorded (an image summary counts once) plus its moving summaries (updated or not).
size_t tower_summary_count(const TowerRegistry& registry);

// tensorpack's MergeAllSummaries: MergeAllSummaries_RunWithOp, or MergeAllSummaries_RunAlone with
// run_alone. Register it after MovingAverageSummary (DEFAULT_CALLBACKS() does), so the averages
// include the step it runs in. chief_only: true; under data-parallel training every rank runs it,
// checks that all have the same scalar tags (std::runtime_error otherwise) and all-reduces them.
// Errors (std::invalid_argument, at the call): a negative `period`; a `key` other than "summaries".
CallbackPtr MergeAllSummaries(MergeAllSummariesOptions options = MergeAllSummariesOptions());

// The default MergeAllSummaries. before_run decides whether the hooked run is due: the last step
// of the epoch, or (period > 0) `(local_step + 1) % period == 0`; a due run's after_run puts
// merge_tower_summaries() with monitors().put_summary() at the incremented global_step (nothing
// when the tower recorded nothing). A run not due costs a comparison. No trigger behaviour.
// Logs once, after the first hooked run: `Summarizing collection 'summaries' of size N.`
// Differences from tensorpack: docs/summaries.md (it puts what the step recorded).
class MergeAllSummaries_RunWithOp : public Callback {  // NOLINT(readability-identifier-naming)
 public:
  explicit MergeAllSummaries_RunWithOp(MergeAllSummariesOptions options = {});
  const MergeAllSummariesOptions& options() const { return options_; }
  // Whether the hooked run in progress is due (decided in before_run; read by SummaryGradient).
  bool due() const { return due_; }

 protected:
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;

 private:
  MergeAllSummariesOptions options_;
  bool due_ = false;
  bool logged_ = false;
};

// MergeAllSummaries with run_alone: the same runs are due and build their summary in after_run;
// trigger_step puts it when `period` matches, and trigger() puts the one kept from the latest due
// step, once (a trigger() with no due step since the last puts nothing). At an epoch's last step
// that `period` matches too, it is put twice, as in tensorpack. Logs as the default one.
class MergeAllSummaries_RunAlone : public Callback {  // NOLINT(readability-identifier-naming)
 public:
  explicit MergeAllSummaries_RunAlone(MergeAllSummariesOptions options = {});
  const MergeAllSummariesOptions& options() const { return options_; }
  // As MergeAllSummaries_RunWithOp::due().
  bool due() const { return due_; }

 protected:
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;
  void _trigger_step() override;
  void _trigger() override;

 private:
  MergeAllSummariesOptions options_;
  bool due_ = false;
  bool logged_ = false;
  bool pending_ = false;  // summary_ holds a due step's summary not yet put by trigger()
  Summary summary_;
};

// tensorpack's SimpleMovingAverage: the mean of named scalar tensors (names the step publishes)
// over the last `window_size` hooked runs. Each hooked run appends their values (.item(): a host
// sync per run) to a ring buffer; trigger_step, when `global_step % window_size == 0`, puts
// `<name>/SMA`, the mean over the rows held (fewer at the start). A step allocates nothing.
// State (checkpoints): `rows` and `values/<name>`, so a resumed run puts the same means.
// Errors: std::invalid_argument at construction for no names, an empty or repeated name, or
// window_size < 1; at the step, for a tensor of more than one element. chief_only: true.
class SimpleMovingAverage : public Callback {
 public:
  SimpleMovingAverage(std::vector<std::string> names, int64_t window_size);

  const std::vector<std::string>& names() const { return fetch_.fetches(); }
  int64_t window_size() const { return window_; }

  // load_state throws std::invalid_argument naming the callback and the entry on a state that
  // does not fit (a missing name, columns of different lengths).
  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

 protected:
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;
  void _trigger_step() override;

 private:
  RunArgs fetch_;
  std::vector<std::string> tags_;  // "<name>/SMA"
  int64_t window_;
  std::vector<double> ring_;  // window_ rows of names().size() values
  int64_t rows_ = 0;          // rows appended so far (held: min(rows_, window_))
};

}  // namespace trainpack
