// Validation during training (tensorpack's callbacks/inference_runner.py): InferenceRunner and
// DataParallelInferenceRunner run the trainer's tower in inference mode over a dataflow and put
// the inferencers' statistics to the monitors.
//
//   callbacks.push_back(std::make_shared<InferenceRunner>(
//       val_batches, std::vector<InferencerPtr>{
//           std::make_shared<ScalarStats>("cost"),
//           std::make_shared<ClassificationError>("wrong-top1", "val-error-top1")}));
//   // every 2 epochs instead of every epoch:
//   callbacks.push_back(std::make_shared<PeriodicTrigger>(runner, PeriodicTriggerOptions()
//                                                                    .every_k_epochs(2)));
//
// When: setup_graph resolves the tower (the trainer must be a TowerTrainer, e.g. SimpleTrainer)
// and asks every inferencer for its fetches; before_train logs how many batches a round runs and
// runs the tower once on the first batch of a pass of the input (eval mode, no gradients), so
// that a name that an inferencer asks for and the tower does not output is an error before
// training starts (a tower's returned cost is its output "cost", as in training). That check
// needs an input whose passes start over from the same data (DataFlow::seekable(): lists,
// FashionMnist, batching and mapping over them); over a generator the names are checked at the
// first round. Every trigger (by default the end of every epoch) runs one round:
//   - the module goes to eval mode (and back to the mode it was in afterwards, also on error),
//     everything runs under NoGradGuard; the training step counters do not move;
//   - every inferencer's before_inference; a new pass of the dataflow; exactly `size()` batches
//     (the dataflow's size; all of its pass when the size is unknown, with a warning at
//     before_train), each checked against the input signature, run through the tower
//     (`ctx.is_training()` is false), and each inferencer's on_fetches with its outputs;
//   - every inferencer's after_inference; each statistic is put with Monitors::put_scalar; then
//     Monitors::validation_done (the runner declares itself a validator at setup_graph, so that
//     MinSaver and EarlyStopping take a stat name as misspelt only once every runner has run).
// A progress bar (tqdm's line, on stderr) shows the round unless disabled.
//
// Errors: an exception while reading or running a batch of a round (the dataflow, the signature
// check, the tower, an inferencer's on_fetches) is nested in a std::runtime_error naming the batch,
// "InferenceRunner: validation batch 3 of 40 failed: <its message>" (" (rank 1's part of the set)"
// under data-parallel training); StopTraining goes through as it is. Besides: a trainer that is
// not a TowerTrainer, an output no tower produced (at before_train, listing those that exist), a
// batch that does not match the signature, a dataflow whose pass ends
// before `size()` batches (logged as tensorpack's ERROR line, then std::runtime_error), null
// arguments. An empty input is std::runtime_error naming the runner and the dataflow (its
// describe(): "BatchData(batch_size=64) over DataFromList (10 datapoints)") and the usual cause, a
// batch larger than the set without BatchData's remainder: a size() of 0 at before_train, a pass
// that yields no batch at a round (tensorpack would put statistics of zero samples; the
// inferencers refuse those too, see callbacks/inference.h):
//   InferenceRunner: the input BatchData(batch_size=64) over DataFromList (10 datapoints) is empty
//   (its size() is 0): there is nothing to validate on. A batch larger than the validation set
//   yields no batch unless BatchData keeps the short last one: use a smaller batch, or
//   BatchData(ds, batch_size, /*remainder=*/true); otherwise, is the validation set empty, or
//   limited to 0 samples? Give it a dataflow that yields at least one batch
//
// chief_only: true (tensorpack's meaning: its results are the chief's).
//
// Data-parallel training (a trainer whose process group has more than one rank;
// docs/distributed.md): the runner runs on every rank, and each rank runs its part of every
// round: the items (batches, when the dataflow batches) at positions r, r + W, r + 2W, ... of the
// pass, for rank r of W. Nothing is dropped and the parts may differ by one (13 batches over 2
// ranks: 7 and 6); their union is the whole pass, with the single process's batches. At the end
// of the round the inferencers' partial sums (callbacks/inference.h) are all-reduced in float64,
// in one call, and every rank computes the whole set's statistics, as one process would (errors
// and counts summed, then divided; never a mean of the ranks' means). The chief puts them to the
// monitors (the others compute and discard them); the progress bar is the chief's and counts the
// chief's batches. Every inferencer must support partial sums: std::invalid_argument at
// setup_graph names one that does not. shard_over_ranks(false) instead runs the runner on the
// chief alone over the whole set (as tensorpack does), while the others train on.
//
// Differences from tensorpack: the input is a DataFlow (tensorpack also takes an InputSource);
// the tower is the training module itself in eval mode (on another device, a replica whose
// weights are copied at the start of every round) instead of a separate graph tower sharing
// variables; an input of unknown size runs one whole pass.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <torch/arg.h>

#include "trainpack/callbacks/inference.h"
#include "trainpack/core/callback.h"
#include "trainpack/input/dataflow.h"

namespace trainpack {

namespace detail {
class InferenceTower;
}

struct InferenceRunnerOptions {
  // The name of the tower in logs and in the TowerContext.
  TORCH_ARG(std::string, tower_name) = "InferenceTower";
  // Unset: the trainer's device.
  TORCH_ARG(std::optional<c10::Device>, device) = std::nullopt;
  // Draw a progress bar for each round (on the chief only, under data-parallel training).
  TORCH_ARG(bool, progress_bar) = true;
  // Under data-parallel training: true, every rank validates its part of the set and the
  // statistics are combined (see above); false, the chief alone validates the whole set (for
  // inferencers without partial sums). No effect in a single process.
  TORCH_ARG(bool, shard_over_ranks) = true;
};

class InferenceRunner : public Callback {
 public:
  InferenceRunner(DataFlowPtr input, std::vector<InferencerPtr> inferencers,
                  InferenceRunnerOptions options = {});
  InferenceRunner(DataFlowPtr input, InferencerPtr inferencer, InferenceRunnerOptions options = {});
  ~InferenceRunner() override;

  // Batches run in the last round (by this rank, under data-parallel training).
  int64_t batches_last_round() const { return batches_last_round_; }

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override;

  // Sets up the towers for `devices` (the first may share the training module).
  void setup_towers(const std::vector<c10::Device>& devices, const std::string& who);
  // Runs a round; `parallel` spreads groups of batches over the towers.
  void run_round(bool parallel, const std::string& who);
  void deliver(const std::vector<at::Tensor>& outputs);
  // Throws the error of an input with nothing to validate on.
  [[noreturn]] void fail_empty_input(const std::string& who, const std::string& why) const;
  // At before_train, for an input of `size` items per pass (nullopt: unknown): sets round_input_
  // (this rank's part when sharding) and size_, and logs what a round runs ("Will eval N
  // iterations<where>").
  void prepare_rounds(std::optional<int64_t> size, const std::string& who,
                      const std::string& where = "");
  // Sharding: all-reduces this rank's `done` batches and the inferencers' partial sums, gives
  // every inferencer its totals back; returns the batches of the whole round.
  int64_t combine_over_ranks(int64_t done, const std::string& who);

  DataFlowPtr input_;
  DataFlowPtr round_input_;  // what a round reads: input_, or this rank's part of it
  bool sharded_ = false;     // data-parallel training with shard_over_ranks
  std::vector<InferencerPtr> inferencers_;
  InferenceRunnerOptions options_;
  std::vector<std::unique_ptr<detail::InferenceTower>> towers_;
  std::vector<std::string> fetches_;            // the union of the inferencers' fetches
  std::vector<std::vector<size_t>> positions_;  // per inferencer: its fetches in fetches_
  int64_t size_ = -1;  // batches per round (this rank's when sharding), -1 when unknown
  int64_t batches_last_round_ = 0;
};

// One tower per device, evaluating groups of batches in parallel: while at least N batches are
// left, N are read and run at once (tower k on batch k, towers 1..N-1 on their own threads), and
// their outputs are given to the inferencers in batch order; the remainder runs on the first
// tower. The inferencers therefore see exactly what InferenceRunner would give them.
//
//   // two CPU replicas on two threads:
//   std::make_shared<DataParallelInferenceRunner>(val, infs,
//       std::vector<c10::Device>{c10::kCPU, c10::kCPU});
//
// Devices: CUDA devices (each must exist), or CPU replicas; the module must derive from
// torch::nn::Cloneable to be replicated (std::invalid_argument otherwise). Replicas get the
// training weights at the start of every round. Errors as InferenceRunner's, plus an empty device
// list. The input's size must be known (std::invalid_argument at before_train otherwise, as
// tensorpack requires).
//
// Differences from tensorpack: the towers are module replicas, CPU ones included; tensorpack's
// literal `{}` log bug is not reproduced.
class DataParallelInferenceRunner : public InferenceRunner {
 public:
  DataParallelInferenceRunner(DataFlowPtr input, std::vector<InferencerPtr> inferencers,
                              std::vector<c10::Device> devices,
                              InferenceRunnerOptions options = {});

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override;

 private:
  std::vector<c10::Device> devices_;
};

}  // namespace trainpack
