// The model of the image_folder example: a small CNN for images of any size and class count.
//
//   input [N, C, H, W] float (normalised)
//   conv 3x3, 32  -> BN -> ReLU -> max-pool 2
//   conv 3x3, 64  -> BN -> ReLU -> max-pool 2
//   conv 3x3, 128 -> BN -> ReLU -> global average pool    [N, 128]
//   linear 128 -> classes                                   logits
//
// The tower function outputs "logits", "cost" and "wrong-top1" (float [N], 1 where the arg-max
// is not the label), and the moving summaries "cost" and "train-error-top1".
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "trainpack/trainpack.h"

namespace image_folder {

class NetImpl : public torch::nn::Cloneable<NetImpl> {
 public:
  NetImpl(int64_t channels, int64_t classes) : channels_(channels), classes_(classes) { reset(); }
  void reset() override {
    namespace nn = torch::nn;
    conv1 = register_module("conv1",
                            nn::Conv2d(nn::Conv2dOptions(channels_, 32, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(32));
    conv2 =
        register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", nn::BatchNorm2d(64));
    conv3 =
        register_module("conv3", nn::Conv2d(nn::Conv2dOptions(64, 128, 3).padding(1).bias(false)));
    bn3 = register_module("bn3", nn::BatchNorm2d(128));
    fc = register_module("fc", nn::Linear(128, classes_));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn1->forward(conv1->forward(x))), 2);
    x = torch::max_pool2d(torch::relu(bn2->forward(conv2->forward(x))), 2);
    x = torch::relu(bn3->forward(conv3->forward(x)));
    return fc->forward(x.mean({2, 3}));
  }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  int64_t channels_, classes_;
};
TORCH_MODULE(Net);

// SGD with momentum 0.9; the learning rate is the graph variable "learning_rate".
class Model : public trainpack::ModelDesc {
 public:
  Model(int64_t channels, int64_t size, int64_t classes, double lr)
      : channels_(channels), size_(size), net_(channels, classes), lr_(lr) {}
  trainpack::InputSignature inputs() const override {
    return {trainpack::InputDesc("input", {-1, channels_, size_, size_}, at::kFloat),
            trainpack::InputDesc("label", {-1}, at::kLong)};
  }
  std::shared_ptr<torch::nn::Module> module() override { return net_.ptr(); }
  at::Tensor build_graph(trainpack::TowerContext& ctx,
                         const std::vector<at::Tensor>& inputs) override {
    const at::Tensor logits = ctx.module_as<NetImpl>().forward(inputs[0]);
    ctx.output("logits", logits);
    at::Tensor cost = torch::nn::functional::cross_entropy(logits, inputs[1]);
    at::Tensor wrong;
    {
      torch::NoGradGuard no_grad;
      wrong = logits.argmax(1).ne(inputs[1]).to(at::kFloat);
    }
    ctx.output("cost", cost);
    ctx.output("wrong-top1", wrong);
    if (ctx.is_main_training_tower()) {
      ctx.add_moving_summary("cost", cost);
      ctx.add_moving_summary("train-error-top1", wrong.mean());
    }
    return cost;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::SGD>(net_->parameters(),
                                               torch::optim::SGDOptions(lr_).momentum(0.9));
  }

 private:
  int64_t channels_, size_;
  Net net_;
  double lr_;
};

}  // namespace image_folder
