// TowerRegistry: what the main training tower records in a step (summaries, moving summaries,
// update ops; train/tower.h describes how a tower function records them). The trainer owns one
// and clears it after every hooked run; callbacks read it. It depends on nothing of the trainer
// kinds, so that the core loop can hold it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace trainpack {

// What the main training tower recorded during the current step: summaries, moving summaries and
// update ops. Owned by the Trainer (`trainer.tower_registry()`), read by MovingAverageSummary,
// MergeAllSummaries and RunUpdateOps, cleared by the trainer at the end of every hooked run.
// Entries are created the first time a name is recorded and kept (so later steps allocate
// nothing); only their per-step values are cleared.
class TowerRegistry {
 public:
  enum class SummaryKind { kScalar, kHistogram, kImage };

  struct SummaryEntry {
    std::string tag;  // "cost-summary", "logits-histogram", "samples"
    SummaryKind kind = SummaryKind::kScalar;
    at::Tensor value;         // this step's value; undefined when not recorded this step
    int64_t max_outputs = 3;  // images only
  };

  struct MovingAverage {
    std::string name;  // "cost"; its summary tag is "cost-summary"
    double decay = 0.95;
    at::Tensor latest;   // this step's value (undefined when not recorded this step); with
                         // gradient accumulation, the latest micro-batch's value
    at::Tensor earlier;  // with gradient accumulation: the sum of the earlier micro-batches' values
    int64_t recorded = 0;     // how many micro-batches of this step recorded it
    int64_t micro_batch = 0;  // the micro-batch that recorded `latest`
    at::Tensor biased;  // the biased EMA, float32 on the value's device (undefined before the first
                        // update)
    int64_t updates = 0;  // t in the zero-debias formula

    // The debiased average biased / (1 - decay^t), as a new tensor on the device (no host sync);
    // undefined before the first update.
    at::Tensor average() const;
  };

  // Records this step's value of a summary. The tag is given as the monitors will see it
  // before normalisation (TowerContext adds the suffixes).
  void record_summary(std::string_view tag, SummaryKind kind, const at::Tensor& value,
                      int64_t max_outputs = 3);
  // The same with the tag `name + suffix`, without building the string once the entry exists.
  void record_summary(std::string_view name, std::string_view suffix, SummaryKind kind,
                      const at::Tensor& value, int64_t max_outputs = 3);
  // Records this step's value of a moving summary. `value` must have one element (else
  // std::invalid_argument naming it); decay must be in [0, 1). Recorded again in a later
  // micro-batch of the same step (begin_micro_batch), the step's value is the mean of the
  // micro-batches' values; recorded twice in one micro-batch, the later value replaces the earlier.
  void record_moving(std::string_view name, const at::Tensor& value, double decay);
  // Records this step's update op.
  void record_update_op(std::string_view name, std::function<void()> op);

  // Folds this step's recorded values into the moving averages (in place, under NoGradGuard, on
  // each value's device; a non-float value is cast to float32). Returns how many were updated.
  size_t update_moving_averages();
  // Runs this step's update ops in the order they were first recorded.
  void run_update_ops();

  const std::vector<SummaryEntry>& summaries() const { return summaries_; }
  const std::vector<MovingAverage>& moving_averages() const { return moving_; }
  // Names of the update ops recorded so far.
  std::vector<std::string> update_op_names() const;

  // Clears the per-step values (called by the trainer after every hooked run).
  void end_step();
  // Marks the start of the step's next micro-batch, when the trainer accumulates gradients over
  // several runs of the tower in one step (SingleCostTrainer::set_accumulate_steps): a moving
  // summary's value for the step is then the mean over the micro-batches that recorded it. The
  // other summaries and the update ops keep the last micro-batch's.
  void begin_micro_batch() { ++micro_batch_; }

  // ---- a step recorded, to be recorded again without running the tower ----

  // What the tower recorded in the step in progress: its summaries, moving summaries and update
  // ops with this step's values. A CUDA graph takes it after the capture and records it again at
  // every replay (replay_step), so that the callbacks see the graph's outputs as a step's.
  struct StepRecord {
    struct Summary {
      std::string tag;
      SummaryKind kind = SummaryKind::kScalar;
      at::Tensor value;
      int64_t max_outputs = 3;
    };
    struct Moving {
      std::string name;
      at::Tensor value;
      double decay = 0.95;
    };
    std::vector<Summary> summaries;
    std::vector<Moving> moving;
    std::vector<std::pair<std::string, std::function<void()>>> update_ops;
  };
  StepRecord step_record() const;
  void replay_step(const StepRecord& record);

  // ---- resumable state (MovingAverageSummary::state / load_state) ----
  // A moving average as a checkpoint holds it.
  struct MovingAverageState {
    std::string name;
    double decay = 0.95;
    double biased = 0.0;  // the float32 biased average, exactly
    int64_t updates = 0;
  };
  // Every moving average updated at least once (reading each value is a host sync), then those
  // restored but not yet recorded again, in that order.
  std::vector<MovingAverageState> moving_average_states() const;
  // Makes each average continue from `states`: an average the tower has already recorded takes
  // its state now; the others take it when the tower first records them (on the value's device),
  // so the registry keeps the tower's order. An average recorded with another decay than the
  // saved one starts again, with a warning. Replaces what an earlier call restored.
  void restore_moving_averages(std::vector<MovingAverageState> states);

 private:
  struct UpdateOp {
    std::string name;
    std::function<void()> op;
  };
  std::vector<SummaryEntry> summaries_;
  std::vector<MovingAverage> moving_;
  std::vector<MovingAverageState> restored_moving_;  // not yet recorded again
  std::vector<UpdateOp> update_ops_;
  int64_t micro_batch_ = 0;  // the micro-batch of the step in progress (0 without accumulation)
};

}  // namespace trainpack
