// A model small enough for tests that train through TrainConfig: y = 2 x0 - x1 learnt by one
// Linear layer from 24 fixed points in batches of 8 (3 steps per epoch), its weights seeded, so
// that every run trains the same numbers.
//
//   TrainConfig().model(std::make_shared<testing::LinearRegressionModel>())
//                .dataflow(testing::linear_regression_batches())
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "trainpack/input/dataflow.h"
#include "trainpack/train/config.h"

namespace trainpack {
namespace testing {

// y = 2 x0 - x1 on 24 fixed points, batches of 8: 3 steps per epoch.
inline DataFlowPtr linear_regression_batches() {
  std::vector<Datapoint> points;
  for (int i = 0; i < 24; ++i) {
    const float a = static_cast<float>(i % 5) - 2.0f;
    const float b = static_cast<float>(i % 3) - 1.0f;
    points.push_back({torch::tensor({a, b}), torch::tensor({2 * a - b})});
  }
  return std::make_shared<BatchData>(std::make_shared<DataFromList>(points), 8);
}

// Inputs "x" [-1, 2] and "y" [-1, 1]; the cost is the mean squared error; SGD with learning rate
// 0.05 and the given momentum (0: plain SGD, no optimizer state).
class LinearRegressionModel : public ModelDesc {
 public:
  explicit LinearRegressionModel(double momentum = 0) : momentum_(momentum) {
    torch::manual_seed(3);
    net = torch::nn::Linear(2, 1);
  }
  InputSignature inputs() const override {
    return {InputDesc("x", {-1, 2}), InputDesc("y", {-1, 1})};
  }
  std::shared_ptr<torch::nn::Module> module() override { return net.ptr(); }
  at::Tensor build_graph(TowerContext&, const std::vector<at::Tensor>& in) override {
    return torch::mse_loss(net->forward(in[0]), in[1]);
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::SGD>(net->parameters(),
                                               torch::optim::SGDOptions(0.05).momentum(momentum_));
  }
  torch::nn::Linear net{nullptr};

 private:
  double momentum_;
};

}  // namespace testing
}  // namespace trainpack
