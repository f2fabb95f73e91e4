// The model of the fashion_mnist example: a small CNN (NetImpl) and its ModelDesc (Model).
//
//   input [N, 28, 28] float in [0, 1]  -> [N, 1, 28, 28]
//   conv 3x3, 32  -> BN -> ReLU -> max-pool 2          [N, 32, 14, 14] (channels-last from here)
//   conv 3x3, 64  -> BN -> ReLU -> max-pool 2          [N, 64, 7, 7]
//   conv 3x3, 128 -> BN -> ReLU -> max-pool 2          [N, 128, 3, 3]
//   linear 1152 -> 10                                  logits
//
// The tower function (Model::build_graph) outputs, for callbacks, inferencers and predictors:
//   "logits"      float [N, 10] (the only output when no labels are fed, e.g. a predictor
//                 asked for {"input"} -> {"logits"})
//   "cost"        mean cross-entropy of the batch (also its return value)
//   "wrong-top1"  float [N], 1 where the arg-max is not the label
//   "wrong-top5"  float [N], 1 where the label is not among the 5 highest logits
// and, in the training tower, the moving summaries "cost", "train-error-top1" and
// "train-error-top5" (tensorpack's ResNet example names). It takes its module from the
// TowerContext (ctx.module_as<NetImpl>()), so it also runs on replicas.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "trainpack/trainpack.h"

namespace fashion_mnist {

class NetImpl : public torch::nn::Cloneable<NetImpl> {
 public:
  NetImpl() { reset(); }

  // Builds (or rebuilds, for clone()) the layers.
  void reset() override {
    namespace nn = torch::nn;
    conv1 =
        register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(32));
    conv2 =
        register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", nn::BatchNorm2d(64));
    conv3 =
        register_module("conv3", nn::Conv2d(nn::Conv2dOptions(64, 128, 3).padding(1).bias(false)));
    bn3 = register_module("bn3", nn::BatchNorm2d(128));
    fc = register_module("fc", nn::Linear(128 * 3 * 3, 10));
  }

  // [N, 28, 28] (or [N, 1, 28, 28]) -> logits [N, 10].
  //
  // The activations are in channels-last layout from conv1 on: LibTorch's CPU max-pooling is
  // about ten times slower in the default layout (measured on 128 x 32 x 28 x 28: 8-11 ms against
  // 0.9 ms, in float32 and in bfloat16). The parameters keep their default layout, so checkpoints
  // are unchanged.
  torch::Tensor forward(torch::Tensor x) {
    x = conv1->forward(channels_last_images(x));
    x = torch::max_pool2d(torch::relu(bn1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(bn2->forward(conv2->forward(x))), 2);
    x = torch::max_pool2d(torch::relu(bn3->forward(conv3->forward(x))), 2);
    return fc->forward(x.flatten(1));
  }

  // [N, 28, 28] or [N, 1, 28, 28] -> [N, 1, 28, 28] with channels-last strides. A convolution
  // returns the layout of its input, but with one channel both layouts are the same bytes and the
  // strides of unsqueeze(1) read as the default layout; so the images get channels-last strides
  // over the same memory (no copy unless x was not contiguous).
  static torch::Tensor channels_last_images(const torch::Tensor& x) {
    const int64_t n = x.size(0), h = x.size(-2), w = x.size(-1);
    return x.reshape({n, 1, h, w}).contiguous().as_strided({n, 1, h, w}, {h * w, 1, w, 1});
  }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

// SGD with Nesterov momentum 0.9 and weight decay; the learning rate is the graph variable
// "learning_rate" that the trainer binds to it (the schedule and hyper.txt set it).
class Model : public trainpack::ModelDesc {
 public:
  Model(double lr, double weight_decay) : lr_(lr), weight_decay_(weight_decay) {}

  trainpack::InputSignature inputs() const override {
    return {trainpack::InputDesc("input", {-1, 28, 28}, at::kFloat),
            trainpack::InputDesc("label", {-1}, at::kLong)};
  }

  std::shared_ptr<torch::nn::Module> module() override { return net_.ptr(); }

  at::Tensor build_graph(trainpack::TowerContext& ctx,
                         const std::vector<at::Tensor>& inputs) override {
    auto& net = ctx.module_as<NetImpl>();
    const at::Tensor logits = net.forward(inputs[0]);
    const at::Tensor& label = inputs[1];
    ctx.output("logits", logits);
    if (!label.defined()) return at::Tensor();  // a predictor fed images only

    at::Tensor cost = torch::nn::functional::cross_entropy(logits, label);
    at::Tensor wrong1, wrong5;
    {
      torch::NoGradGuard no_grad;
      wrong1 = logits.argmax(1).ne(label).to(at::kFloat);
      wrong5 =
          std::get<1>(logits.topk(5, 1)).eq(label.unsqueeze(1)).any(1).logical_not().to(at::kFloat);
    }
    ctx.output("cost", cost);
    ctx.output("wrong-top1", wrong1);
    ctx.output("wrong-top5", wrong5);
    if (ctx.is_main_training_tower()) {  // elsewhere moving summaries are ignored
      ctx.add_moving_summary("cost", cost);
      ctx.add_moving_summary("train-error-top1", wrong1.mean());
      ctx.add_moving_summary("train-error-top5", wrong5.mean());
      // What TensorBoard's Images and Histograms dashboards show, at each epoch's last step
      // (MergeAllSummaries): the step's first 3 training images (tags input/image/0..2) and the
      // classifier's weights (fc/weight-histogram). Recording them costs a 3-image slice a step.
      ctx.summary_image("input", inputs[0].slice(0, 0, 3).unsqueeze(-1).mul(255).round(), 3);
      ctx.summary_histogram("fc/weight", net.fc->weight.detach());
    }
    return cost;
  }

  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::SGD>(
        net_->parameters(),
        torch::optim::SGDOptions(lr_).momentum(0.9).nesterov(true).weight_decay(weight_decay_));
  }

  Net& net() { return net_; }

 private:
  Net net_;
  double lr_;
  double weight_decay_;
};

}  // namespace fashion_mnist
