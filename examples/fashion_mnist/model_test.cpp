// The main job's model (model.h): its channels-last activations compute the same function as the
// default layout, for every input form the program and the predictors feed, and conv1 really
// returns channels-last activations (the speed of max-pooling depends on it; a LibTorch that
// decided layouts otherwise would make this test fail rather than silently slow the job down).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model.h"

namespace {

// The model's function written plainly, in LibTorch's default layout.
torch::Tensor reference_forward(fashion_mnist::NetImpl& net, const torch::Tensor& images) {
  torch::Tensor x = images.reshape({images.size(0), 1, 28, 28}).contiguous();
  x = torch::max_pool2d(torch::relu(net.bn1->forward(net.conv1->forward(x))), 2);
  x = torch::max_pool2d(torch::relu(net.bn2->forward(net.conv2->forward(x))), 2);
  x = torch::max_pool2d(torch::relu(net.bn3->forward(net.conv3->forward(x))), 2);
  return net.fc->forward(x.flatten(1));
}

TEST(FashionMnistModel, Conv1ReturnsChannelsLastActivations) {
  fashion_mnist::Net net;
  const torch::Tensor images = torch::rand({4, 28, 28});
  const torch::Tensor prepared = fashion_mnist::NetImpl::channels_last_images(images);
  EXPECT_EQ(prepared.data_ptr(), images.data_ptr()) << "the strides change, not the bytes";
  const torch::Tensor activations = net->conv1->forward(prepared);
  EXPECT_TRUE(activations.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(activations.is_contiguous());
}

TEST(FashionMnistModel, ForwardEqualsTheDefaultLayoutInTrainingAndEvaluation) {
  torch::manual_seed(3);
  fashion_mnist::Net net;
  const torch::Tensor images = torch::rand({16, 28, 28});
  for (const bool training : {true, false}) {
    // Batch norm's running statistics move with every training forward: compare two copies.
    fashion_mnist::Net a = std::dynamic_pointer_cast<fashion_mnist::NetImpl>(net->clone());
    fashion_mnist::Net b = std::dynamic_pointer_cast<fashion_mnist::NetImpl>(net->clone());
    a->train(training);
    b->train(training);
    const torch::Tensor got = a->forward(images);
    const torch::Tensor want = reference_forward(*b, images);
    EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-5)) << "training=" << training;
    EXPECT_TRUE(torch::allclose(a->bn1->running_mean, b->bn1->running_mean, 1e-5, 1e-6));
  }
}

TEST(FashionMnistModel, ForwardTakesEveryInputForm) {
  torch::manual_seed(4);
  fashion_mnist::Net net;
  net->eval();
  const torch::Tensor batch = torch::rand({10, 28, 28});
  const torch::Tensor want = net->forward(batch);
  // With the channel dimension, as a predictor may feed it.
  EXPECT_TRUE(torch::allclose(net->forward(batch.unsqueeze(1)), want, 1e-5, 1e-6));
  // A slice of a batch: contiguous, but its data starts inside the storage.
  const torch::Tensor slice = batch.slice(0, 3, 7);
  EXPECT_NE(slice.storage_offset(), 0);
  EXPECT_TRUE(torch::allclose(net->forward(slice), want.slice(0, 3, 7), 1e-5, 1e-6));
  // Not contiguous at all (every other image).
  const torch::Tensor strided = batch.slice(0, 0, 10, 2);
  EXPECT_TRUE(torch::allclose(net->forward(strided), want.slice(0, 0, 10, 2), 1e-5, 1e-6));
  // An empty batch.
  EXPECT_EQ(net->forward(torch::rand({0, 28, 28})).sizes(), (std::vector<int64_t>{0, 10}));
}

}  // namespace
