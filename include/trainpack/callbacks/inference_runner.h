// Validation during training (tensorpack's callbacks/inference_runner.py): InferenceRunner and
// DataParallelInferenceRunner run the trainer's tower in inference mode over a dataflow and put
// the inferencers' statistics to the monitors. See docs/inference.md.
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
  // statistics are combined (see InferenceRunner); false, the chief alone validates the whole set
  // (for inferencers without partial sums). No effect in a single process.
  TORCH_ARG(bool, shard_over_ranks) = true;
};

// tensorpack's InferenceRunner. setup_graph resolves the tower (the trainer must be a
// TowerTrainer), asks every inferencer for its fetches, and declares the runner a validator
// (Monitors::add_validator). before_train logs `[InferenceRunner] Will eval N iterations` and, for
// a seekable input, runs the tower once on the first batch (eval mode, no gradients), so that a
// fetch the tower does not output is an error before training (over a generator: at the first
// round).
// Every trigger (every epoch end by default) runs one round: the module in eval mode (restored
// afterwards, also on error) under NoGradGuard, the step counters unchanged; every
// before_inference; a new pass of exactly size() batches (a whole pass when unknown), each checked
// against the input signature, run through the tower and given to on_fetches; every
// after_inference, each statistic put with Monitors::put_scalar; then Monitors::validation_done.
// A progress bar on stderr unless disabled. chief_only: true (the results are the chief's).
// Under data-parallel training every rank runs its part of each round (items r, r + W, ... of the
// pass), the inferencers' partial sums are all-reduced, and the chief puts what one process
// would; every inferencer must then support partial sums (std::invalid_argument at setup_graph).
// Errors: an exception in a batch of a round is nested in std::runtime_error("InferenceRunner:
// validation batch 3 of 40 failed: <its message>"); StopTraining goes through. Also: a trainer
// that is not a TowerTrainer, an output no tower produces (listing those that exist), a batch that
// does not match the signature, a pass that ends before size() batches, null arguments, and an
// empty input (a size() of 0 at before_train, a pass with no batch at a round), naming the
// dataflow (its describe()) and the usual cause.
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
  // At before_train, for `size` items per pass (nullopt: unknown): sets round_input_ (this rank's
  // part when sharding) and size_, and logs "Will eval N iterations<where>".
  void prepare_rounds(std::optional<int64_t> size, const std::string& who,
                      const std::string& where = "");
  // Sharding: all-reduces `done` and the partial sums; returns the batches of the whole round.
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

// tensorpack's DataParallelInferenceRunner: one tower per device (CUDA devices that exist, or CPU
// replicas): the first on the training device is the module itself, the others replicas of a
// torch::nn::Cloneable module, given the training weights at every round. While at least N
// batches are left, N run at once, tower k on batch k, and the inferencers get the outputs in
// batch order: what InferenceRunner would give them. Errors as InferenceRunner's, plus an empty
// device list, a module that cannot be replicated, and an input of unknown size (before_train).
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
