// Test support: a NoOpTrainer that holds a small model and its optimizer, registered as
// SingleCostTrainer registers them (what ModelSaver, SaverRestore and the training state map have
// to write and to restore).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "trainpack/core/callback.h"
#include "trainpack/core/session_init.h"
#include "trainpack/core/trainer.h"

namespace trainpack {
namespace testing {

struct ModelTrainerOptions {
  // torch::manual_seed's seed, set before the model is made.
  TORCH_ARG(uint64_t, seed) = 1;
  // A BatchNorm1d(2) after the Linear, the two in a Sequential (entries "0.*" and "1.*", the
  // BatchNorm's running statistics among them); without it the Linear alone ("weight", "bias").
  TORCH_ARG(bool, batch_norm) = false;
  // The optimizer is SGD with learning rate 0.1 and this momentum (0: plain SGD).
  TORCH_ARG(double, momentum) = 0.9;
  // false: the model alone, without an optimizer.
  TORCH_ARG(bool, optimizer) = true;
  // The optimizer's learning rate as the variable "learning_rate" (read from its first group, set
  // in all of them).
  TORCH_ARG(bool, learning_rate_variable) = false;
  // Whether the trainer handles SIGINT and SIGTERM (a trainer's default).
  TORCH_ARG(bool, handle_signals) = true;
};

// A NoOpTrainer with a Linear(3, 2) module (made right after torch::manual_seed: the same weights
// in every run) and an SGD optimizer, as `options` say.
struct ModelTrainer {
  torch::nn::Linear net{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};      // null without batch_norm
  std::unique_ptr<torch::optim::SGD> opt;  // null without an optimizer
  NoOpTrainer trainer;

  explicit ModelTrainer(const ModelTrainerOptions& options = {}) {
    torch::manual_seed(options.seed());
    net = torch::nn::Linear(torch::nn::LinearOptions(3, 2));
    std::shared_ptr<torch::nn::Module> model = net.ptr();
    if (options.batch_norm()) {
      bn = torch::nn::BatchNorm1d(2);
      model = torch::nn::Sequential(net, bn).ptr();
    }
    trainer.graph().add_module("", model);
    if (options.optimizer()) {
      opt = std::make_unique<torch::optim::SGD>(
          model->parameters(), torch::optim::SGDOptions(0.1).momentum(options.momentum()));
      trainer.graph().add_optimizer("", opt.get());
    }
    if (options.learning_rate_variable()) {
      torch::optim::SGD* o = opt.get();
      trainer.graph().add_variable(
          "learning_rate", [o] { return o->param_groups().front().options().get_lr(); },
          [o](double lr) {
            for (auto& g : o->param_groups()) g.options().set_lr(lr);
          });
    }
    trainer.set_handle_signals(options.handle_signals());
  }

  // Trains with `callbacks` (and no monitor) epochs 1 to `max_epoch` of `steps_per_epoch` steps,
  // after `init` when given.
  void train(const std::vector<CallbackPtr>& callbacks, int64_t steps_per_epoch, int64_t max_epoch,
             std::shared_ptr<SessionInit> init = nullptr) {
    trainer.train(callbacks, {}, steps_per_epoch, 1, max_epoch, std::move(init));
  }

  // One optimizer step on a fixed batch (after it, momentum buffers exist and a BatchNorm's
  // running mean has moved).
  void sgd_step() {
    opt->zero_grad();
    at::Tensor y = net->forward(torch::ones({4, 3}));
    if (bn) y = bn->forward(y);
    y.pow(2).sum().backward();
    opt->step();
  }
};

}  // namespace testing
}  // namespace trainpack
