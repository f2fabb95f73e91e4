// Summary callbacks (tensorpack's callbacks/summary.py): they turn what the training tower
// records (TowerContext::summary_scalar/histogram/image, add_moving_summary) into monitor data.
// docs/summaries.md tells the whole story; in short:
//
//   MovingAverageSummary   updates the moving averages (EMA, decay 0.95) after every step
//   MergeAllSummaries      materialises the summaries on the last step of each epoch (and every
//                          `period` steps) and puts them to the monitors (`cost-summary` ->
//                          monitor scalar `cost`)
//   SimpleMovingAverage    the mean of named scalars over the last `window_size` hooked runs
//   LearningRateSummary    the optimizers' learning rates, every epoch end (or every step)
//
// MovingAverageSummary and MergeAllSummaries are in DEFAULT_CALLBACKS(), in tensorpack's order
// (MovingAverageSummary, ProgressBar, MergeAllSummaries, RunUpdateOps): both act in the same
// hooked run, so a materialised EMA includes the current step.
//
// The tower registry (trainer().tower_registry()) holds only the current step's values: the
// trainer clears them after every hooked run, so these callbacks read them in that same run
// (RunArgs ops and after_run).
//
// Data-parallel training (a trainer whose process group has more than one rank;
// docs/distributed.md): MovingAverageSummary and MergeAllSummaries run on every rank (they stay
// chief_only in tensorpack's meaning: what they put is the chief's). Every rank keeps the moving
// averages of its own steps, and nothing is communicated per step; where MergeAllSummaries
// materialises (the last step of each epoch by default, and every `period` steps), the scalars it
// puts (moving averages and scalar summaries) are the mean over the ranks of each rank's own
// value: one all-reduce of all of them, packed in one float64 tensor, divided by the number of
// ranks. Histograms and images are the chief's own. Only the chief's monitors receive them.
//
// Differences from tensorpack: there is no graph to evaluate outside a step, so whatever is
// materialised is the value of a step that ran with hooks (see MergeAllSummaries_RunAlone); the
// set of summaries is known only after the first step, so the setup log lines of tensorpack come
// after the first step; under data-parallel training the scalars are the mean over the ranks
// (tensorpack's multi-GPU trainers summarise the first tower's values, Horovod's the chief's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/callback.h"
#include "trainpack/utils/summary.h"

namespace trainpack {

class TowerRegistry;

// Updates the moving averages of the training tower (TowerContext::add_moving_summary) along
// with every hooked run, on each value's device, without a host sync:
// biased_t = decay * biased_{t-1} + (1 - decay) * x_t, average = biased_t / (1 - decay^t) (so the
// first average is x_1 exactly). It also runs the closures registered in the Graph collection
// `collection` (Graph::add_to_collection) with every step.
//
//   callbacks.push_back(std::make_shared<MovingAverageSummary>());
//
// When: setup_graph builds the per-step request once; before_run returns it (by reference, no
// allocation); its op runs after the step function and before any after_run, so callbacks after
// it (MergeAllSummaries) see the updated average in their after_run.
// Which moving averages: those in tensorpack's default collection, `MOVING_SUMMARY_OPS`: with
// another `collection`, only that Graph collection's closures run and the tower's moving
// averages are left alone (as in tensorpack, where add_moving_summary adds its update ops to
// MOVING_SUMMARY_OPS).
// Logs, once, after the first hooked run: `[MovingAverageSummary] 1 operations in collection
// 'MOVING_SUMMARY_OPS' will be run with session hooks.` (the Graph collection's closures plus the
// moving averages updated in that run).
// Without this callback the moving averages are never updated, and MergeAllSummaries puts none.
// State (checkpoints; with the default collection only): for each moving average of the tower,
// `biased/<name>` (float64, the biased average), `updates/<name>` (int64, t of the zero-debias)
// and `decay/<name>` (float64). Restored (TowerRegistry::restore_moving_averages), each average
// continues from its saved value when the tower records it again, so a resumed run puts the
// same averages as an uninterrupted one.
//
// chief_only: true; runs on every rank under data-parallel training (see the top of this file).
// Errors: std::invalid_argument for an empty `collection`.
//
// Differences from tensorpack: the log line comes after the first step instead of at setup (the
// tower runs, and records its moving summaries, at every step); the `train_op` argument (run the
// updates as control dependencies of another op) is dropped: the updates always run with the
// hooked run; the averages are checkpointed (tensorpack's EMA variables are local variables,
// which restart after a resume).
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
  // > 0: also materialise every `period` steps of an epoch (when (local_step + 1) % period == 0;
  // local, so it restarts every epoch). 0: only at the end of each epoch.
  TORCH_ARG(int64_t, period) = 0;
  // false: materialise within the hooked run of the due step (MergeAllSummaries_RunWithOp).
  // true: keep what the due step recorded and put it at trigger (MergeAllSummaries_RunAlone).
  TORCH_ARG(bool, run_alone) = false;
  // The summary collection: the tower records every summary in "summaries" (Graph::kSummaries),
  // the only key accepted.
  TORCH_ARG(std::string, key) = "summaries";
};

// Builds the Summary of what the training tower recorded in the current hooked run, as
// MergeAllSummaries puts it: in registry order, every summary entry with a value this step
// - scalar: `<name>-summary`, its value read with .item() (a host sync);
// - histogram: `<name>-histogram`, TensorFlow's histogram of every element (make_histogram);
// - image: the first `max_outputs` images of the batch (HW, HWC, NHW or NHWC; cast to uint8
//   without clipping, as Monitors::put_image does), PNG-encoded, tagged as tf.summary.image tags
//   them: `<name>/image` when max_outputs is 1, `<name>/image/<k>` otherwise;
// then every moving average updated at least once (by MovingAverageSummary): `<name>-summary`
// with the debiased average. Scalar tags reach the monitors normalised by put_summary
// (`cost-summary` -> `cost`). Errors: std::invalid_argument naming `who` and the summary for an
// image that is not an image, or a NaN/infinite value in a histogram.
Summary merge_tower_summaries(const TowerRegistry& registry, const char* who = "MergeAllSummaries");

// The size of the summary collection, as tensorpack counts it: the summaries the tower has
// recorded (an image summary counts once) plus its moving summaries (updated or not).
size_t tower_summary_count(const TowerRegistry& registry);

// tensorpack's factory: MergeAllSummaries_RunWithOp (default) or MergeAllSummaries_RunAlone.
//
//   callbacks.push_back(MergeAllSummaries());                                     // epoch ends
//   callbacks.push_back(MergeAllSummaries(MergeAllSummariesOptions().period(100)));  // and more
//
// Register it after MovingAverageSummary (DEFAULT_CALLBACKS() does): then the EMAs it puts
// include the step it runs in. chief_only: true; under data-parallel training it runs on every
// rank and the scalars it puts are the mean over the ranks (see the top of this file): at every
// materialised step, one all-reduce (after a check, on every rank, that all ranks have the same
// scalar tags: std::runtime_error naming this rank's tags otherwise). With 2 ranks the value put
// is exactly (a + b) / 2 in float64 of the ranks' values a and b.
// Errors (std::invalid_argument, at the call): a negative `period`; a `key` other than
// "summaries".
CallbackPtr MergeAllSummaries(MergeAllSummariesOptions options = MergeAllSummariesOptions());

// The default MergeAllSummaries: in before_run it decides whether this hooked run is due,
// `local_step == steps_per_epoch - 1` (the last step of the epoch) or (`period > 0` and
// `(local_step + 1) % period == 0`); if so, its after_run builds merge_tower_summaries() of that
// same run and calls trainer().monitors().put_summary() (at the incremented global_step, as
// tensorpack's). A run that is not due costs a comparison: no sync, no allocation. Every due
// hooked run is materialised (a run_step with several hooked runs puts several summaries). No
// trigger behaviour. Nothing is put when the tower recorded nothing.
// Logs, once, after the first hooked run: `Summarizing collection 'summaries' of size N.`
// (N = tower_summary_count).
//
// Differences from tensorpack: the summaries are materialised in after_run from what the step
// recorded (tensorpack fetches the merged summary op with the step); the log line comes after
// the first step instead of at setup; images are cast as Monitors::put_image casts them, not
// rescaled per image as tf.summary.image does; a scalar summary of a double tensor keeps double
// precision (tensorpack's simple_value is a float32; the EMAs are float32, as there).
class MergeAllSummaries_RunWithOp : public Callback {  // NOLINT(readability-identifier-naming)
 public:
  explicit MergeAllSummaries_RunWithOp(MergeAllSummariesOptions options = {});
  const MergeAllSummariesOptions& options() const { return options_; }
  // Whether the hooked run in progress is one it materialises (decided in before_run; read by
  // SummaryGradient during the step).
  bool due() const { return due_; }

 protected:
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;

 private:
  MergeAllSummariesOptions options_;
  bool due_ = false;
  bool logged_ = false;
};

// MergeAllSummaries with run_alone: tensorpack evaluates the summaries in a separate session run
// at `trigger()` (by default every epoch end) and, with `period`, in trigger_step when
// `(local_step + 1) % period == 0`. An eager step records its summaries only while it runs, so
// here: before_run marks the same runs due as MergeAllSummaries_RunWithOp (the last step of each
// epoch, and every `period` steps); their after_run builds the summary and keeps it; trigger_step
// puts it when `period` matches, and trigger() puts the one kept from the latest due step (then
// forgets it, so a trigger() without a due step since the last one puts nothing). At the last
// step of an epoch that `period` also matches, the summary is put twice (trigger_step, then
// trigger), as in tensorpack.
// Logs as MergeAllSummaries_RunWithOp.
//
// Differences from tensorpack: the values are those of the last due step, not of an extra run
// after it (which in TensorFlow also consumed a batch of the input); a trigger() at another
// moment (e.g. under PeriodicTrigger) puts the latest due step's summary, if not yet put by a
// trigger().
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

// The mean of named scalar tensors over a sliding window of hooked runs. Every hooked run it
// fetches the tensors (names the step publishes, e.g. "cost") and appends their values as one
// row to a ring buffer of `window_size` rows; in trigger_step, when `global_step % window_size
// == 0`, it puts `<name>/SMA` = the mean of each column over the rows held (fewer than
// window_size at the start) with Monitors::put_scalar.
//
//   callbacks.push_back(std::make_shared<SimpleMovingAverage>(
//       std::vector<std::string>{"cost"}, 100));   // "cost/SMA" every 100 steps
//
// Cost: the ring buffer is allocated at construction and the request built once, so a step
// allocates nothing; but reading a value needs .item(), a device-to-host sync at every hooked
// run, which is inherent to this callback (tensorpack fetches every step too).
// chief_only: true.
// Errors: std::invalid_argument (constructor) for no names, an empty or repeated name, or
// window_size < 1; at the step, std::invalid_argument naming SimpleMovingAverage and the tensor
// when it has more than one element; a name the step does not publish is the trainer's error
// listing the names it does publish.
//
// State (checkpoints): `rows` (int64, the rows appended so far) and, per name, `values/<name>`
// (float64 [n], the window's values of that tensor, oldest first, n = min(rows, window_size)); a
// resumed run puts the same means as an uninterrupted one. A saved window longer than
// window_size keeps its last window_size rows.
//
// Differences from tensorpack: the display name is the published name (tensorpack strips
// `:0` from a tensor name).
class SimpleMovingAverage : public Callback {
 public:
  SimpleMovingAverage(std::vector<std::string> names, int64_t window_size);

  const std::vector<std::string>& names() const { return fetch_.fetches(); }
  int64_t window_size() const { return window_; }

  // See "State" above; load_state throws std::invalid_argument naming the callback and the entry
  // on a state that does not fit (a missing name, columns of different lengths).
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

struct LearningRateSummaryOptions {
  // Put the rates after every step (in trigger_step) instead of at every trigger() (by default
  // every epoch end).
  TORCH_ARG(bool, every_step) = false;
};

// Puts the learning rate of every parameter group of the trainer's optimizers to the monitors, so
// that it is in stats.json, the event file and the epoch-end printout (PyTorch Lightning's
// LearningRateMonitor; a tensorpack model adds a summary of its own).
//
//   callbacks.push_back(std::make_shared<LearningRateSummary>());  // every epoch end
//   callbacks.push_back(std::make_shared<LearningRateSummary>(
//       LearningRateSummaryOptions().every_step(true)));  // after every step
//
// Names, one per parameter group, for the optimizers of graph().optimizers() in order:
// `learning_rate` for group 0 of the optimizer registered as "" (SingleCostTrainer's), and
// `learning_rate/group<k>` for its group k >= 1; for an optimizer registered under a name (a
// GAN's "gen"): `learning_rate/gen` and `learning_rate/gen/group<k>`. Group 0 of "" is what the
// Graph variable "learning_rate" reads (the setters set every group).
// What: the rate each group's options hold (OptimizerOptions::get_lr), read in before_run: the
// value the step ran with, whatever the order of this callback and the hyperparameter setters
// (which change the rate between steps).
// When: trigger() (every epoch end by default; wrap it in PeriodicTrigger for another period)
// puts the rates the last step before it ran with (the rates of now when no step ran since the
// last put); with every_step, trigger_step puts the rates of the step that just ran, at the
// incremented global_step, and trigger() puts nothing. Under the epoch schedule
// {(1, 0.1), (3, 0.01)} with the rate constructed as 0.5, epochs 1 to 4 put 0.5, 0.1, 0.1 and 0.01
// (docs/schedules.md).
// Cost: before_run copies one double per group into a vector sized at setup; a put per group.
// Errors: std::invalid_argument at setup_graph (naming LearningRateSummary) when the trainer has
// no optimizer, and when a group's options have no learning rate (a custom OptimizerOptions that
// does not implement get_lr), naming the optimizer and the group. chief_only: true (the
// monitors are the chief's).
//
// Differences from tensorpack: an addition. From Lightning's LearningRateMonitor: every_step
// instead of logging_interval; no log_momentum; the names above instead of `lr-SGD/pg1`.
class LearningRateSummary : public Callback {
 public:
  explicit LearningRateSummary(LearningRateSummaryOptions options = {});

  // The names it puts, one per parameter group, in order (set at setup_graph, and again when the
  // optimizers' groups change).
  const std::vector<std::string>& names() const { return names_; }

 protected:
  void _setup_graph() override;
  RunArgs _before_run(const StepContext& ctx) override;
  void _trigger_step() override;
  void _trigger() override;

 private:
  // Names every group (and checks that its options have a rate): names_, group_counts_, rates_.
  void name_groups();
  // Reads every group's rate into rates_ (renaming the groups first if they changed).
  void read_rates();
  void put_rates();

  LearningRateSummaryOptions options_;
  std::vector<std::string> names_;
  std::vector<size_t> group_counts_;  // per optimizer, its groups when named
  std::vector<double> rates_;
  bool has_rates_ = false;  // rates_ were read since the last put
};

}  // namespace trainpack
