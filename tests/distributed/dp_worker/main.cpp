// trainpack_dp_worker: one rank of the data-parallel tests (tests/distributed/). It trains a small
// seeded model with DataParallelTrainer on the group its environment describes (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT; none: one process) and writes its final parameters.
//
//   trainpack_dp_worker <out file> [global batch] [epochs] [steps per epoch]
//
// The data: 96 points, shuffled per pass from a fixed seed; rank r takes the points at positions
// r, r + W, r + 2W, ... of each pass, so that the ranks' batches k together are the single
// process's batch k at the same global batch. <out file> receives the parameters (float32, in the
// module's order) as raw bytes. Exit status 0 when training finished, 1 on an error (stderr).
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "trainpack/trainpack.h"

namespace {

using namespace trainpack;  // NOLINT(google-build-using-namespace): a test program

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(3, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Net);

// Keeps the datapoints at positions rank, rank + world, ... of each pass of `inner`.
class EveryNth : public DataFlow {
 public:
  EveryNth(DataFlowPtr inner, int64_t rank, int64_t world)
      : inner_(std::move(inner)), rank_(rank), world_(world) {}
  std::string name() const override { return "EveryNth"; }
  std::optional<int64_t> size() const override { return *inner_->size() / world_; }

 protected:
  void _begin_pass(int64_t pass) override { inner_->begin_pass(pass); }
  std::optional<Datapoint> _next() override {
    std::optional<Datapoint> mine;
    for (int64_t i = 0; i < world_; ++i) {
      auto dp = inner_->next();
      if (!dp) return std::nullopt;
      if (i == rank_) mine = std::move(dp);
    }
    return mine;
  }

 private:
  DataFlowPtr inner_;
  int64_t rank_, world_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <out file> [global batch] [epochs] [steps per epoch]\n",
                 argv[0]);
    return 2;
  }
  try {
    const int64_t global_batch = argc > 2 ? std::stoll(argv[2]) : 16;
    const int64_t epochs = argc > 3 ? std::stoll(argv[3]) : 3;
    const int64_t steps = argc > 4 ? std::stoll(argv[4]) : 6;
    torch::manual_seed(7);
    torch::set_num_threads(1);
    auto group = ProcessGroup::from_environment(
        DistributedOptions().timeout(std::chrono::seconds(20)));
    std::vector<Datapoint> points;
    for (int i = 0; i < 96; ++i) {
      const float a = std::sin(0.37f * static_cast<float>(i));
      const float b = std::cos(0.91f * static_cast<float>(i));
      const float c = static_cast<float>(i % 9) / 4.0f - 1.0f;
      points.push_back({torch::tensor({a, b, c}), torch::tensor({a * b - c})});
    }
    DataFlowPtr flow =
        std::make_shared<DataFromList>(points, DataFromListOptions().shuffle(true).seed(3));
    flow = std::make_shared<EveryNth>(flow, group->rank(), group->world_size());
    flow = std::make_shared<BatchData>(flow, global_batch / group->world_size());
    Net net;
    DataParallelTrainer trainer(group);
    trainer.setup_graph(
        {InputDesc("x", {-1, 3}), InputDesc("y", {-1, 1})}, std::make_shared<FeedInput>(flow),
        net.ptr(),
        [&](TowerContext& ctx, const std::vector<at::Tensor>& in) {
          auto cost = torch::mse_loss(net->forward(in[0]), in[1]);
          ctx.add_moving_summary("cost", cost);
          return cost;
        },
        [&] {
          return std::make_unique<torch::optim::SGD>(
              net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
        });
    trainer.train_with_defaults(TrainOptions()
                                    .steps_per_epoch(steps)
                                    .max_epoch(epochs)
                                    .extra_callbacks({})
                                    .monitors({}));
    std::ofstream out(argv[1], std::ios::binary);
    for (const auto& p : net->parameters()) {
      at::Tensor c = p.detach().contiguous();
      out.write(static_cast<const char*>(c.data_ptr()), c.numel() * sizeof(float));
    }
    if (!out) throw std::runtime_error(std::string("cannot write ") + argv[1]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainpack_dp_worker: %s\n", e.what());
    return 1;
  }
}
