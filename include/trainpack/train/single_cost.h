// Trainers of a model given as a tower function (tensorpack's train/tower.py and
// train/trainers.py): TowerTrainer (tower function, predictors), SingleCostTrainer (one cost,
// one optimizer) and SimpleTrainer (one tower on one device). docs/models.md shows them in use.
//
// setup_graph registers the input source's callbacks, then the trainer's own (all before the
// step counter), moves the module to the trainer's device, builds the optimizer once, binds the
// graph variable `learning_rate` to the learning rate of every parameter group (its range is
// finite and > 0, so a setter refuses a NaN, infinite, zero or negative rate), and adds the
// module's trainable parameters to the graph (Graph::trainable_variables).
//
// SimpleTrainer's step: next batch from the input source -> tower function in a training
// TowerContext (outputs published to the step, summaries recorded; under autocast with
// set_precision) -> zero_grad, backward (of the cost times the loss scale in float16), in float16
// the unscaling of the gradients (a step with an inf or NaN gradient ends here), the gradient
// processors, optimizer step. The returned cost, which must be a scalar (std::invalid_argument
// otherwise), is also published as "cost" unless the tower outputs a tensor of that name itself.
//
// Differences from tensorpack: the module and the optimizer are LibTorch objects passed in
// (tensorpack builds them inside the tower function); predictors are per trainer
// (docs/tensorpack-differences.md #12); a predict tower replicates the module instead of sharing
// TF variables.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "trainpack/core/trainer.h"
#include "trainpack/input/input_source.h"
#include "trainpack/train/cuda_graph.h"
#include "trainpack/train/gradproc.h"
#include "trainpack/train/loss_scaler.h"
#include "trainpack/train/precision.h"
#include "trainpack/train/tower.h"

namespace trainpack {

// A callable running the tower in inference mode, made by TowerTrainer::get_predictor.
class Predictor {
 public:
  Predictor(std::string tower_name, TowerFunc tower, InputSignature signature,
            std::vector<std::string> input_names, std::vector<std::string> output_names,
            std::shared_ptr<torch::nn::Module> module, std::shared_ptr<torch::nn::Module> source,
            c10::Device device, Precision precision = Precision::kFloat32);

  // Runs the tower on `inputs` (one per input name, in that order; moved to the device) and
  // returns the outputs in the order of the output names. An output the tower never produced is
  // std::invalid_argument listing the names it does output; a wrong number of inputs too.
  std::vector<at::Tensor> operator()(const std::vector<at::Tensor>& inputs);

  const std::string& tower_name() const { return tower_name_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  c10::Device device() const { return device_; }
  // The precision the tower runs in (the trainer's; autocast as in training).
  Precision precision() const { return precision_; }

 private:
  std::string tower_name_;
  TowerFunc tower_;
  InputSignature signature_;
  std::vector<std::string> input_names_;
  std::vector<std::string> output_names_;
  std::vector<int> input_positions_;           // position in the signature of each input name
  std::shared_ptr<torch::nn::Module> module_;  // what runs
  std::shared_ptr<torch::nn::Module> source_;  // the training module, when module_ is a replica
  c10::Device device_;
  Precision precision_;
};

// A trainer with a tower function, an input signature and a module (tensorpack's TowerTrainer).
class TowerTrainer : public Trainer {
 public:
  explicit TowerTrainer(c10::Device device = c10::Device(c10::kCPU));

  // Sets the tower function, its signature and the module it trains. Call once.
  void set_tower_func(TowerFunc tower, InputSignature signature,
                      std::shared_ptr<torch::nn::Module> module);
  const TowerFunc& tower_func() const;
  const InputSignature& input_signature() const { return signature_; }
  const std::shared_ptr<torch::nn::Module>& module() const { return module_; }
  // The training device.
  c10::Device device() const { return device_; }

  // Mixed precision (train/precision.h, docs/mixed-precision.md): the tower runs under autocast to
  // bfloat16 or float16, in training and in the predictors; the parameters and the optimizer stay
  // float32. SingleCostTrainer adds the loss scaling that float16 needs. Call before the tower
  // function is set (std::logic_error later); the device's support is checked when the tower is
  // set (check_precision_supported: float16 needs CUDA).
  void set_precision(Precision precision);
  Precision precision() const { return precision_; }

  // A callable that runs the tower function in inference mode (the module in eval mode, then back
  // to its previous mode; NoGradGuard) on `device`, feeding the named inputs and returning the
  // named outputs; built once per (device, input names, output names). On another device than the
  // trainer's, the module is replicated (it must be a torch::nn::Cloneable), its parameters and
  // buffers copied from the training module before each call, and the tower must take its module
  // from `ctx.module_as<NetImpl>()`. Inputs not given reach the tower as undefined tensors. Unknown
  // input names are std::invalid_argument listing the signature; a CUDA device without a GPU is
  // std::runtime_error.
  std::shared_ptr<Predictor> get_predictor(const std::vector<std::string>& input_names,
                                           const std::vector<std::string>& output_names,
                                           std::optional<c10::Device> device = std::nullopt);

 protected:
  c10::Device device_;

 private:
  TowerFunc tower_;
  InputSignature signature_;
  std::shared_ptr<torch::nn::Module> module_;
  bool tower_set_ = false;
  Precision precision_ = Precision::kFloat32;
  // Replicas per device (the training device maps to module_ itself).
  std::map<std::string, std::shared_ptr<torch::nn::Module>> replicas_;
  std::map<std::tuple<std::string, std::vector<std::string>, std::vector<std::string>>,
           std::shared_ptr<Predictor>>
      predictors_;
};

// A trainer that minimises one cost with one optimizer (tensorpack's SingleCostTrainer).
class SingleCostTrainer : public TowerTrainer {
 public:
  using OptimizerFn = std::function<std::unique_ptr<torch::optim::Optimizer>()>;
  using TowerTrainer::TowerTrainer;

  // See the top of this file. Call once, before train(). Null arguments are std::invalid_argument
  // naming them.
  void setup_graph(InputSignature signature, InputSourcePtr input,
                   std::shared_ptr<torch::nn::Module> module, TowerFunc cost_fn,
                   OptimizerFn optimizer_fn);

  torch::optim::Optimizer& optimizer() const;
  const InputSourcePtr& input() const { return input_; }
  std::string data_description() const override { return input_ ? input_->describe() : ""; }

  // The gradient processors run, in this order, between backward and the optimizer step
  // (tensorpack's optimizer.apply_grad_processors; train/gradproc.h). Call before train(); an
  // empty list (the default) means none. A null processor is std::invalid_argument.
  void set_gradient_processors(std::vector<GradientProcessorPtr> processors);
  const std::vector<GradientProcessorPtr>& gradient_processors() const {
    return gradient_processors_;
  }

  // Gradient accumulation (Lightning's accumulate_grad_batches; docs/gradients.md): every step
  // runs the tower on `n` micro-batches, each backward on cost / n, then the gradient processors
  // and one optimizer step. global_step, steps_per_epoch and every trigger count optimizer steps.
  // The cost the step publishes, and each moving summary, is the mean over the micro-batches;
  // other outputs and summaries are the last one's. Call before train(); n < 1 is
  // std::invalid_argument.
  void set_accumulate_steps(int64_t n);
  int64_t accumulate_steps() const { return accumulate_steps_; }

  // Dynamic loss scaling (train/loss_scaler.h): a float16 run always has it, with GradScaler's
  // defaults unless this sets other options; in float32 or bfloat16, which need none, calling
  // this turns it on (harmless there: the scale is a power of two, so the gradients are exact).
  // Call before setup_graph (std::logic_error after); bad options are std::invalid_argument.
  void set_loss_scaler_options(LossScalerOptions options);
  // The training step as a CUDA graph (train/cuda_graph.h, docs/gpu.md): after
  // options.warmup_steps() eager steps, SimpleTrainer captures the tower, the backward and the
  // optimizer's step once and replays them. Checked when training starts: what a graph cannot
  // hold (an optimizer other than SGD, Adam and AdamW, float16's loss scaling, gradient
  // processors, gradient accumulation) is std::invalid_argument naming it; a CPU device, or a
  // data-parallel world of more than one process, trains eager with one warning. Call before
  // train(); warmup_steps < 1 is std::invalid_argument.
  void set_cuda_graph(CudaGraphOptions options);
  const std::optional<CudaGraphOptions>& cuda_graph() const { return cuda_graph_options_; }

  // The loss scaler, set up by setup_graph; null when the run has none. Its scale and growth
  // count are the graph variables `loss_scale` and `loss_scale_growth_tracker`, saved in
  // checkpoints.
  LossScaler* loss_scaler() const { return loss_scaler_.get(); }

 protected:
  // The subclass's own callbacks (registered after the input source's).
  virtual std::vector<CallbackPtr> _setup_graph() { return {}; }

  // Runs the tower on one batch in a training context attached to `ctx`; returns the cost.
  at::Tensor run_tower(StepContext& ctx, const std::vector<at::Tensor>& batch);

  // With gradient accumulation: runs micro-batch `index` of the step and returns its cost divided
  // by accumulate_steps(), the tensor to call backward on. After the last one,
  // publish_micro_batch_cost publishes the mean cost (unless the tower publishes "cost" itself).
  at::Tensor run_micro_batch(StepContext& ctx, const std::vector<at::Tensor>& batch, int64_t index);
  void publish_micro_batch_cost(StepContext& ctx);

  // Runs the gradient processors on the module's trainable parameters, once per optimizer step,
  // after the last backward (and the all-reduce) and right before optimizer().step().
  void process_gradients(StepContext& ctx) {
    if (!gradient_processors_.empty()) run_gradient_processors(ctx);
  }

  // The tensor to call backward on for `cost`: `cost` itself, or cost * the loss scale in a
  // float16 run.
  at::Tensor loss_for_backward(const at::Tensor& cost) const {
    return loss_scaler_ ? loss_scaler_->scale(cost) : cost;
  }

  // What a step does after its last backward (and the gradients' all-reduce): in a float16 run,
  // unscales the gradients and skips the rest of the step when one is inf or NaN (the scaler
  // backs off); then the gradient processors and optimizer().step(). Returns false when the step
  // was skipped.
  bool apply_gradients(StepContext& ctx);

 private:
  void run_gradient_processors(StepContext& ctx);
  const NamedGradients& named_gradients();

  std::vector<GradientProcessorPtr> gradient_processors_;
  int64_t accumulate_steps_ = 1;
  bool tower_publishes_cost_ = false;  // in this step's first micro-batch
  at::Tensor micro_batch_cost_sum_;    // this step's micro-batch costs, summed (when requested)
  NamedGradients named_gradients_;     // built at the first processed step
  InputSourcePtr input_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::optional<LossScalerOptions> loss_scaler_options_;
  std::unique_ptr<LossScaler> loss_scaler_;
  bool setup_graph_done_ = false;
  std::optional<CudaGraphOptions> cuda_graph_options_;
};

// One tower on one device: the plain training loop (tensorpack's SimpleTrainer).
class SimpleTrainer : public SingleCostTrainer {
 public:
  using SingleCostTrainer::SingleCostTrainer;
  ~SimpleTrainer() override;
  void run_step() override;
  // The CUDA graph of the step (set_cuda_graph), once training has started on a CUDA device;
  // null otherwise.
  const CudaGraphStep* cuda_graph_step() const { return graph_step_.get(); }

 protected:
  std::vector<CallbackPtr> _setup_graph() override;
  // Checks set_cuda_graph's options against the run and creates the graph step.
  void _after_initialize() override;
  // Whether the step may be captured at all in this process (DataParallelTrainer: a world of
  // one); `why_not` says why not.
  virtual bool cuda_graph_possible(std::string* why_not) const;

 private:
  void run_eager_step(StepContext& ctx, const std::vector<at::Tensor>& batch);
  std::unique_ptr<CudaGraphStep> graph_step_;
  CudaGraphStep::Body graph_body_;
};

}  // namespace trainpack
