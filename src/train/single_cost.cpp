// One module: TowerTrainer (the tower function, its Predictors) has one subclass here,
// SingleCostTrainer, and SimpleTrainer is SingleCostTrainer's step on one device; tensorpack's
// train/tower.py holds TowerTrainer and SingleCostTrainer together too.
#include "trainpack/train/single_cost.h"

#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/nn/cloneable.h>
#include <torch/torch.h>

#include <stdexcept>

#include "trainpack/utils/demangle.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

std::string tower_name_for(const c10::Device& device) {
  return device.is_cpu() ? "tower-pred-cpu" : fmt::format("tower-pred-{}", device.str());
}

void check_device_available(const c10::Device& device, const char* who) {
  if (device.is_cuda() && !torch::cuda::is_available()) {
    throw std::runtime_error(fmt::format(
        "{}: device {} was requested, but no CUDA GPU is available (this LibTorch has CUDA: "
        "{}); use the CPU device (c10::Device(c10::kCPU)) or run on a machine with a GPU",
        who, device.str(), torch::cuda::is_available() ? "yes" : "no / no device"));
  }
}

// Copies the parameters and buffers of `from` into `to` (same structure, possibly another
// device).
void copy_state(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto src_params = from.named_parameters(/*recurse=*/true);
  auto dst_params = to.named_parameters(/*recurse=*/true);
  for (auto& p : dst_params) p.value().copy_(src_params[p.key()], /*non_blocking=*/true);
  auto src_buffers = from.named_buffers(/*recurse=*/true);
  auto dst_buffers = to.named_buffers(/*recurse=*/true);
  for (auto& b : dst_buffers) b.value().copy_(src_buffers[b.key()], /*non_blocking=*/true);
}

}  // namespace

// ---- Predictor ----

Predictor::Predictor(std::string tower_name, TowerFunc tower, InputSignature signature,
                     std::vector<std::string> input_names, std::vector<std::string> output_names,
                     std::shared_ptr<torch::nn::Module> module,
                     std::shared_ptr<torch::nn::Module> source, c10::Device device,
                     Precision precision)
    : tower_name_(std::move(tower_name)),
      tower_(std::move(tower)),
      signature_(std::move(signature)),
      input_names_(std::move(input_names)),
      output_names_(std::move(output_names)),
      module_(std::move(module)),
      source_(std::move(source)),
      device_(device),
      precision_(precision) {
  for (const auto& name : input_names_) {
    int pos = -1;
    for (size_t i = 0; i < signature_.size(); ++i) {
      if (signature_[i].name == name) pos = static_cast<int>(i);
    }
    if (pos < 0) {
      std::vector<std::string> names;
      for (const auto& d : signature_) names.push_back(d.name);
      throw std::invalid_argument(
          fmt::format("get_predictor: '{}' is not an input of the model; its inputs are: {}", name,
                      fmt::join(names, ", ")));
    }
    input_positions_.push_back(pos);
  }
  if (output_names_.empty()) {
    throw std::invalid_argument("get_predictor: output_names is empty; name at least one output");
  }
}

std::vector<at::Tensor> Predictor::operator()(const std::vector<at::Tensor>& inputs) {
  if (inputs.size() != input_names_.size()) {
    throw std::invalid_argument(fmt::format("Predictor '{}': expected {} inputs ({}), got {}",
                                            tower_name_, input_names_.size(),
                                            fmt::join(input_names_, ", "), inputs.size()));
  }
  std::vector<at::Tensor> full(signature_.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    full[static_cast<size_t>(input_positions_[i])] =
        inputs[i].defined() ? inputs[i].to(device_) : inputs[i];
  }
  if (source_) copy_state(*source_, *module_);

  std::vector<at::Tensor> outputs;
  TowerContext ctx(tower_name_, /*is_training=*/false);
  ctx.set_module(module_.get());
  ctx.collect_outputs(&output_names_, &outputs);
  const bool was_training = module_->is_training();
  module_->eval();
  try {
    torch::NoGradGuard no_grad;
    AutocastGuard autocast(device_.type(), autocast_dtype(precision_));
    ctx.output_returned_cost(tower_(ctx, full));
  } catch (...) {
    module_->train(was_training);
    throw;
  }
  module_->train(was_training);
  if (source_) ctx.check_module_used(fmt::format("Predictor '{}'", tower_name_), device_.str());
  ctx.check_collected_outputs(fmt::format("Predictor '{}'", tower_name_));
  return outputs;
}

// ---- TowerTrainer ----

TowerTrainer::TowerTrainer(c10::Device device) : device_(device) {}

void TowerTrainer::set_tower_func(TowerFunc tower, InputSignature signature,
                                  std::shared_ptr<torch::nn::Module> module) {
  if (!tower)
    throw std::invalid_argument("TowerTrainer::set_tower_func: the tower function is empty");
  if (!module) throw std::invalid_argument("TowerTrainer::set_tower_func: the module is null");
  if (signature.empty()) {
    throw std::invalid_argument(
        "TowerTrainer::set_tower_func: the input signature is empty; describe every input with "
        "an InputDesc");
  }
  call_once(tower_set_, "set_tower_func");
  check_precision_supported(precision_, device_, "TowerTrainer");
  tower_ = std::move(tower);
  signature_ = std::move(signature);
  module_ = std::move(module);
}

void TowerTrainer::set_precision(Precision precision) {
  if (tower_set_) {
    throw std::logic_error(
        "TowerTrainer::set_precision: the tower function is set already; call set_precision "
        "before setup_graph (or give TrainConfig::precision to launch_train_with_config)");
  }
  precision_ = precision;
}

const TowerFunc& TowerTrainer::tower_func() const {
  if (!tower_set_) {
    throw std::logic_error("TowerTrainer::tower_func: no tower function was set (setup_graph)");
  }
  return tower_;
}

std::shared_ptr<Predictor> TowerTrainer::get_predictor(const std::vector<std::string>& input_names,
                                                       const std::vector<std::string>& output_names,
                                                       std::optional<c10::Device> device_opt) {
  if (!tower_set_) {
    throw std::logic_error(
        "TowerTrainer::get_predictor: call setup_graph (or set_tower_func) first");
  }
  const c10::Device device = device_opt.value_or(device_);
  check_device_available(device, "TowerTrainer::get_predictor");
  auto key = std::make_tuple(device.str(), input_names, output_names);
  auto found = predictors_.find(key);
  if (found != predictors_.end()) return found->second;

  std::shared_ptr<torch::nn::Module> module = module_;
  std::shared_ptr<torch::nn::Module> source;
  if (device != device_) {
    auto& replica = replicas_[device.str()];
    if (!replica) {
      TP_LOG_INFO("Building graph for predict tower '{}' on device {} ...", tower_name_for(device),
                  device.str());
      try {
        replica = module_->clone(device);
      } catch (const std::exception& e) {
        throw std::invalid_argument(fmt::format(
            "TowerTrainer::get_predictor: the module cannot be replicated on {} ({}); derive it "
            "from torch::nn::Cloneable, or ask for a predictor on the training device {}",
            device.str(), e.what(), device_.str()));
      }
    }
    module = replica;
    source = module_;
  } else if (predictors_.empty()) {
    TP_LOG_INFO("Building graph for predict tower '{}' on device {} ...", tower_name_for(device),
                device.str());
  }
  check_precision_supported(precision_, device, "get_predictor");  // float32 passes at once
  auto predictor =
      std::make_shared<Predictor>(tower_name_for(device), tower_, signature_, input_names,
                                  output_names, module, source, device, precision_);
  predictors_.emplace(std::move(key), predictor);
  return predictor;
}

// ---- SingleCostTrainer ----

void SingleCostTrainer::setup_graph(InputSignature signature, InputSourcePtr input,
                                    std::shared_ptr<torch::nn::Module> module, TowerFunc cost_fn,
                                    OptimizerFn optimizer_fn) {
  if (!input)
    throw std::invalid_argument("SingleCostTrainer::setup_graph: the input source is null");
  if (!optimizer_fn) {
    throw std::invalid_argument("SingleCostTrainer::setup_graph: the optimizer function is empty");
  }
  call_once(setup_graph_done_, "setup_graph");
  check_device_available(device_, "SingleCostTrainer::setup_graph");
  set_tower_func(std::move(cost_fn), signature, module);
  TP_LOG_INFO("Precision: {}", describe_precision(precision(), device_));

  module->to(device_);
  module->train();
  optimizer_ = optimizer_fn();
  if (!optimizer_) {
    throw std::invalid_argument(
        "SingleCostTrainer::setup_graph: the optimizer function returned null");
  }
  if (optimizer_->param_groups().empty()) {
    throw std::invalid_argument(
        "SingleCostTrainer::setup_graph: the optimizer has no parameter groups");
  }
  torch::optim::Optimizer* opt = optimizer_.get();
  graph().add_variable(
      "learning_rate", [opt] { return opt->param_groups().front().options().get_lr(); },
      [opt](double lr) {
        for (auto& group : opt->param_groups()) group.options().set_lr(lr);
      },
      /*is_floating=*/true,
      ValueRange().min_exclusive(0));  // a NaN or negative rate ruins the weights
  for (const auto& p : module->named_parameters(/*recurse=*/true)) {
    if (p.value().requires_grad()) graph().add_trainable_variable(p.key(), p.value());
  }
  // What ModelSaver saves and SaverRestore restores (core/state.h): the module under its own
  // names, the optimizer as "optimizer".
  graph().add_module("", module);
  graph().add_optimizer("", opt);
  if (precision() == Precision::kFloat16 || loss_scaler_options_) {
    loss_scaler_ = std::make_unique<LossScaler>(loss_scaler_options_.value_or(LossScalerOptions()));
    // Graph variables, so that checkpoints hold the scaler's state and a resume continues it.
    LossScaler* scaler = loss_scaler_.get();
    graph().add_variable(
        "loss_scale", [scaler] { return scaler->scale_value(); },
        [scaler](double v) { scaler->set_scale(v); }, /*is_floating=*/true,
        ValueRange().min_exclusive(0));
    graph().add_variable(
        "loss_scale_growth_tracker",
        [scaler] { return static_cast<double>(scaler->growth_tracker()); },
        [scaler](double v) { scaler->set_growth_tracker(static_cast<int64_t>(v)); },
        /*is_floating=*/false, ValueRange().min(0));
  }

  input_ = std::move(input);
  for (auto& cb : input_->setup(signature, device_)) register_callback(std::move(cb));
  for (auto& cb : _setup_graph()) register_callback(std::move(cb));
}

torch::optim::Optimizer& SingleCostTrainer::optimizer() const {
  if (!optimizer_) {
    throw std::logic_error("SingleCostTrainer::optimizer: call setup_graph first");
  }
  return *optimizer_;
}

void SingleCostTrainer::set_gradient_processors(std::vector<GradientProcessorPtr> processors) {
  for (size_t i = 0; i < processors.size(); ++i) {
    if (!processors[i]) {
      throw std::invalid_argument(
          fmt::format("SingleCostTrainer::set_gradient_processors: processor #{} is null", i));
    }
  }
  gradient_processors_ = std::move(processors);
  named_gradients_.clear();
}

const NamedGradients& SingleCostTrainer::named_gradients() {
  if (named_gradients_.empty()) {
    for (const auto& p : module()->named_parameters(/*recurse=*/true)) {
      if (p.value().requires_grad()) named_gradients_.push_back({p.key(), p.value()});
    }
  }
  return named_gradients_;
}

void SingleCostTrainer::run_gradient_processors(StepContext& ctx) {
  apply_gradient_processors(gradient_processors_, named_gradients(), ctx);
}

void SingleCostTrainer::set_loss_scaler_options(LossScalerOptions options) {
  if (setup_graph_done_) {
    throw std::logic_error(
        "SingleCostTrainer::set_loss_scaler_options: call it before setup_graph");
  }
  LossScaler check(options);  // the options' errors now, not at setup
  loss_scaler_options_ = options;
}

bool SingleCostTrainer::apply_gradients(StepContext& ctx) {
  if (loss_scaler_) {
    const bool finite = loss_scaler_->unscale(named_gradients());
    loss_scaler_->update();
    if (!finite) return false;  // GradScaler's rule: no processors, no optimizer step
  }
  process_gradients(ctx);
  optimizer().step();
  return true;
}

void SingleCostTrainer::set_cuda_graph(CudaGraphOptions options) {
  if (options.warmup_steps() < 1) {
    throw std::invalid_argument(fmt::format(
        "SingleCostTrainer::set_cuda_graph: warmup_steps must be >= 1 (the optimizer's state must "
        "exist before the capture), got {}",
        options.warmup_steps()));
  }
  cuda_graph_options_ = options;
}

void SingleCostTrainer::set_accumulate_steps(int64_t n) {
  if (n < 1) {
    throw std::invalid_argument(fmt::format(
        "SingleCostTrainer::set_accumulate_steps: n must be >= 1 (1: no accumulation), got {}", n));
  }
  accumulate_steps_ = n;
}

at::Tensor SingleCostTrainer::run_micro_batch(StepContext& ctx,
                                              const std::vector<at::Tensor>& batch, int64_t index) {
  if (index > 0) tower_registry().begin_micro_batch();
  at::Tensor cost = run_tower(ctx, batch);
  if (index == 0) {
    // run_tower published the cost unless the tower did; from the second micro-batch on,
    // has_value("cost") is true either way, so it is decided here, once per step.
    tower_publishes_cost_ = ctx.has_value("cost") && !ctx.fetched("cost").is_same(cost);
    micro_batch_cost_sum_ = at::Tensor();
  }
  if (!tower_publishes_cost_ && ctx.is_requested("cost")) {
    c10::NoGradGuard no_grad;
    micro_batch_cost_sum_ = micro_batch_cost_sum_.defined() ? micro_batch_cost_sum_ + cost.detach()
                                                            : cost.detach().clone();
  }
  return cost / static_cast<double>(accumulate_steps_);
}

void SingleCostTrainer::publish_micro_batch_cost(StepContext& ctx) {
  if (tower_publishes_cost_ || !micro_batch_cost_sum_.defined()) return;
  ctx.publish("cost", micro_batch_cost_sum_ / static_cast<double>(accumulate_steps_));
  micro_batch_cost_sum_ = at::Tensor();
}

at::Tensor SingleCostTrainer::run_tower(StepContext& ctx, const std::vector<at::Tensor>& batch) {
  TowerContext tower("tower0", /*is_training=*/true, &ctx, &tower_registry());
  tower.set_module(module().get());
  at::Tensor cost;
  {
    AutocastGuard autocast(device_.type(), autocast_dtype(precision()));
    cost = tower_func()(tower, batch);
  }
  if (!cost.defined()) {
    throw std::invalid_argument(
        "SingleCostTrainer: the tower function returned an undefined cost; return the scalar "
        "loss to minimise");
  }
  if (cost.numel() != 1) {
    throw std::invalid_argument(fmt::format(
        "SingleCostTrainer: the cost must be a scalar, but the tower function returned a tensor "
        "of shape [{}]; reduce it (e.g. .mean())",
        fmt::join(cost.sizes().begin(), cost.sizes().end(), ", ")));
  }
  if (!ctx.has_value("cost")) ctx.publish("cost", cost);  // unless the tower published its own
  return cost;
}

// ---- SimpleTrainer ----

std::vector<CallbackPtr> SimpleTrainer::_setup_graph() {
  TP_LOG_INFO("Building graph for a single training tower on device {} ...", device().str());
  return {};
}

SimpleTrainer::~SimpleTrainer() = default;

bool SimpleTrainer::cuda_graph_possible(std::string* why_not) const {
  if (!device().is_cuda()) {
    *why_not =
        fmt::format("the device is {}, and CUDA graphs exist on CUDA devices only", device().str());
    return false;
  }
  return true;
}

void SimpleTrainer::_after_initialize() {
  if (!cuda_graph()) return;
  const std::string refusal = cuda_graph_refusal(
      optimizer(), loss_scaler() != nullptr, !gradient_processors().empty(), accumulate_steps());
  if (!refusal.empty()) {
    throw std::invalid_argument(fmt::format("{}: the step cannot be captured as a CUDA graph: {}",
                                            class_name(typeid(*this)), refusal));
  }
  std::string why_not;
  if (!cuda_graph_possible(&why_not)) {
    TP_LOG_WARN("[CudaGraph] {}: training runs eager", why_not);
    return;
  }
  graph_step_ =
      std::make_unique<CudaGraphStep>(*cuda_graph(), device(), optimizer(), tower_registry());
  // No loss scaler, no gradient processors (refused above): the optimizer's step is all that
  // apply_gradients would do, and the graph step does it.
  graph_body_ = [this](StepContext& ctx, const std::vector<at::Tensor>& batch) {
    run_tower(ctx, batch).backward();
  };
  TP_LOG_INFO("[CudaGraph] the step is captured after {} warm-up step(s) and replayed",
              cuda_graph()->warmup_steps());
}

void SimpleTrainer::run_eager_step(StepContext& ctx, const std::vector<at::Tensor>& batch) {
  at::Tensor cost = run_tower(ctx, batch);
  auto& opt = optimizer();
  opt.zero_grad();
  loss_for_backward(cost).backward();
  apply_gradients(ctx);
}

void SimpleTrainer::run_step() {
  if (accumulate_steps() > 1) {
    hooked_run([this](StepContext& ctx) {
      auto& opt = optimizer();
      for (int64_t i = 0; i < accumulate_steps(); ++i) {
        const std::vector<at::Tensor> batch = input()->next_batch();
        at::Tensor cost = run_micro_batch(ctx, batch, i);
        if (i == 0) opt.zero_grad();
        loss_for_backward(cost).backward();  // adds to the earlier micro-batches' gradients
      }
      publish_micro_batch_cost(ctx);
      apply_gradients(ctx);
    });
    return;
  }
  if (graph_step_) {
    hooked_run([this](StepContext& ctx) {
      const std::vector<at::Tensor> batch = input()->next_batch();
      graph_step_->run(ctx, batch, graph_body_, global_step());
    });
    return;
  }
  hooked_run([this](StepContext& ctx) {
    const std::vector<at::Tensor> batch = input()->next_batch();
    run_eager_step(ctx, batch);
  });
}

}  // namespace trainpack
