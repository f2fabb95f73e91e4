// ModelDesc, TrainConfig and launch_train_with_config (tensorpack's ModelDesc, train/config.py
// and train/interface.py): the one-call way to train a model (docs/models.md shows a whole
// program).
//
// launch_train_with_config: a dataflow becomes FeedInput for a SimpleTrainer and QueueInput for
// any other trainer (logging "Automatically applying QueueInput on the DataFlow."); then
// trainer.setup_graph(model inputs, input, model module, build_graph, optimizer) and
// trainer.train_with_defaults(...) with the config's callbacks, monitors, session_init,
// steps_per_epoch, starting_epoch and max_epoch.
//
// Errors (std::invalid_argument, naming TrainConfig and the field): no model; both or neither of
// dataflow and data; steps_per_epoch unset while the input's size is unknown (also logged as
// tensorpack's ERROR line); starting_epoch < 1; max_epoch < starting_epoch - 1.
//
// Differences from tensorpack: ModelDesc hands over a module and an optimizer object instead of
// building them in a TF graph; no session_creator/session_config (nothing to configure).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include "trainpack/utils/arg.h"

#include "trainpack/core/callback.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/session_init.h"
#include "trainpack/core/trainer.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/train/cuda_graph.h"
#include "trainpack/train/gradproc.h"
#include "trainpack/train/precision.h"
#include "trainpack/train/tower.h"

namespace trainpack {

class SingleCostTrainer;

// A model for launch_train_with_config (tensorpack's ModelDesc).
class ModelDesc {
 public:
  virtual ~ModelDesc();
  // The input signature (tensorpack's inputs()).
  virtual InputSignature inputs() const = 0;
  // The module whose parameters are trained.
  virtual std::shared_ptr<torch::nn::Module> module() = 0;
  // The tower function: the cost of one batch (tensorpack's build_graph).
  virtual at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& inputs) = 0;
  // The optimizer, called once (tensorpack's optimizer()).
  virtual std::unique_ptr<torch::optim::Optimizer> optimizer() = 0;
};

// tensorpack's TrainConfig; see the top of this file. Defaults are tensorpack's (max_epoch 99999).
struct TrainConfig {
  TORCH_ARG(DataFlowPtr, dataflow);
  TORCH_ARG(InputSourcePtr, data);
  TORCH_ARG(std::shared_ptr<ModelDesc>, model);
  TORCH_ARG(std::vector<CallbackPtr>, callbacks);
  // Unset: DEFAULT_CALLBACKS(); an empty list (`{}` too): none.
  TRAINPACK_LIST_ARG(CallbackPtr, extra_callbacks);
  // Unset: DEFAULT_MONITORS(); an empty list (`{}` too): none.
  TRAINPACK_LIST_ARG(MonitorPtr, monitors);
  TORCH_ARG(std::shared_ptr<SessionInit>, session_init);
  TORCH_ARG(int64_t, starting_epoch) = 1;
  // Unset: 0 (or the restored checkpoint's). See TrainOptions::starting_global_step.
  TORCH_ARG(std::optional<int64_t>, starting_global_step);
  // Unset: the input's size (one pass per epoch), divided by accumulate_steps (rounded down).
  TORCH_ARG(std::optional<int64_t>, steps_per_epoch);
  TORCH_ARG(int64_t, max_epoch) = 99999;
  // Run in order between backward and the optimizer step (train/gradproc.h); given to the
  // trainer with SingleCostTrainer::set_gradient_processors unless empty.
  TORCH_ARG(std::vector<GradientProcessorPtr>, gradient_processors);
  // Batches per optimizer step (SingleCostTrainer::set_accumulate_steps): each step accumulates
  // the gradients of this many batches; 1 is the plain step.
  TORCH_ARG(int64_t, accumulate_steps) = 1;
  // Mixed precision of the tower (TowerTrainer::set_precision; docs/mixed-precision.md). Unset:
  // the trainer's own (float32 unless set on it).
  TORCH_ARG(std::optional<Precision>, precision);
  // The step as a CUDA graph (SingleCostTrainer::set_cuda_graph; docs/gpu.md). Unset: eager.
  TORCH_ARG(std::optional<CudaGraphOptions>, cuda_graph);
  // Resume a checkpoint saved over another input (another batch size or data set): refused by
  // default, since its data position would be reinterpreted (InputSource::set_allow_changed_input).
  TORCH_ARG(bool, allow_changed_input) = false;
};

void launch_train_with_config(const TrainConfig& config, SingleCostTrainer& trainer);

// Thrown by AutoResumeTrainConfig when the logger directory holds what a previous run left
// (checkpoints, the `checkpoint` index, best copies like min-val-error-top1.data) but no
// checkpoint it can resume from, or only one older than checkpoints it cannot resume: training
// there would overwrite them. what() lists each file with the reason and says how to start over
// (a new directory, or logger::set_logger_dir(dir, 'b'), which moves the directory aside).
class AutoResumeError : public std::runtime_error {
 public:
  AutoResumeError(std::string dir, std::vector<std::pair<std::string, std::string>> unusable,
                  const std::string& message);
  const std::string& dir() const { return dir_; }
  // (file, why it cannot be resumed), newest checkpoint first.
  const std::vector<std::pair<std::string, std::string>>& unusable() const { return unusable_; }

 private:
  std::string dir_;
  std::vector<std::pair<std::string, std::string>> unusable_;
};

// The options of AutoResumeTrainConfig.
struct AutoResumeOptions {
  // Resume even when the config has a session_init of its own (tensorpack's always_resume).
  TORCH_ARG(bool, always_resume) = true;
  // Resume from a checkpoint that lacks some of the model's parameter tensors (they keep their
  // fresh initialisation, with a warning naming them). Off (the default): such a checkpoint is
  // refused at run_init, naming the tensors (usually another model's, or one changed by mistake).
  TORCH_ARG(bool, allow_missing_parameters) = false;
};

// tensorpack's AutoResumeTrainConfig: a TrainConfig that continues the run found in the logger
// directory (set it first). When the directory holds checkpoints (and `always_resume`, or no
// session_init was given), the session_init becomes SaverRestore of the newest one that can be
// resumed (find_latest_valid_checkpoint), which must hold every parameter tensor of the model
// unless allow_missing_parameters; logs `Will load checkpoint at {path}.` (or `Found checkpoint
// at {path}. session_init arguments will be overwritten.`). The run continues from the
// checkpoint's counters (Trainer::set_resume_point), and JSONWriter appends to stats.json. A
// directory with no checkpoint, no index and no best copy starts from scratch, as tensorpack's
// does (log.log and stats.json are kept aside). Errors: no logger directory is
// std::invalid_argument; AutoResumeError as find_latest_valid_checkpoint. Differences from
// tensorpack (docs/tensorpack-differences.md #7): the counters come from the checkpoint, not from
// stats.json; a corrupt latest checkpoint falls back to an older one; a directory whose
// checkpoints are all unusable is refused.
class AutoResumeTrainConfig : public TrainConfig {
 public:
  explicit AutoResumeTrainConfig(TrainConfig config, bool always_resume = true);
  AutoResumeTrainConfig(TrainConfig config, AutoResumeOptions options);
  // The checkpoint prefix that will be restored; empty when the run starts from scratch.
  const std::string& found_checkpoint() const { return found_checkpoint_; }
  // Where the run will continue, known before initialize(): the found checkpoint's counters
  // (the epoch, the 0-based step in it that runs next, global_step), read from the checkpoint
  // file on each call. nullopt when the run starts from scratch or the checkpoint holds no
  // counters (a weights-only one). Throws CheckpointError when the file cannot be read any more.
  std::optional<ResumePoint> resume_point() const;

  // The checkpoint to resume from in `dir` (nullopt when it holds nothing a fresh run would
  // overwrite): of the `model-<step>.data` files and those the `checkpoint` index names, the one
  // with the highest step that passes its checksum and holds counters in range and finite
  // weights. Each one skipped is a warning naming the file and the reason (as are index entries
  // outside the directory, missing or a symlink loop). Throws AutoResumeError when only older
  // checkpoints than unusable ones, or none, can be resumed: nothing is overwritten.
  static std::optional<std::string> find_latest_valid_checkpoint(const std::string& dir);

 private:
  std::string found_checkpoint_;
};

}  // namespace trainpack
