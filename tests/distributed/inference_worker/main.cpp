// trainpack_inference_worker: one rank of the tests of validation and training statistics under
// data-parallel training (tests/distributed/inference_test.cpp). It trains a small seeded model
// with DataParallelTrainer on the group its environment describes (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT; none: one process), with the default callbacks and monitors, and
// validates at every epoch end twice over the same 101 points (13 batches of 8, the last of 5):
//   - an InferenceRunner sharded over the ranks: `validation_cost`, `validation_error`;
//   - an InferenceRunner on the chief alone over the whole set (shard_over_ranks(false)), the
//     single-process figure of the same weights: `whole_cost`, `whole_error`.
//
//   trainpack_inference_worker <log dir> <learning rate> [epochs] [mode]
//
// Modes: `plain` (the default); `unseekable`: the validation batches come through a flow that
// cannot seek, so each rank reads the others' batches and drops them (instead of seeking past
// them); `no-partial-sums`: the sharded runner also has an inferencer of the user's without
// partial sums (MeanAbs), which data-parallel validation must refuse at setup.
//
// It prints, on every rank, after every epoch, its own moving averages as MergeAllSummaries
// materialised them, before they are averaged over the ranks (17 significant digits):
//   local rank=<r> epoch=<e> <name>=<value>
// Exit status 0 when training finished, 1 on an error (stderr).
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainpack/trainpack.h"

#include "programs/programs.h"

namespace inference_worker {

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

std::vector<Datapoint> make_points(int n, float phase) {
  std::vector<Datapoint> points;
  for (int i = 0; i < n; ++i) {
    const float t = static_cast<float>(i) + phase;
    const float a = std::sin(0.37f * t);
    const float b = std::cos(0.91f * t);
    const float c = static_cast<float>(i % 9) / 4.0f - 1.0f;
    points.push_back({torch::tensor({a, b, c}), torch::tensor({a * b - c})});
  }
  return points;
}

// A flow of known size that cannot seek.
class NoSeek : public DataFlow {
 public:
  explicit NoSeek(DataFlowPtr inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "NoSeek"; }
  std::optional<int64_t> size() const override { return inner_->size(); }

 protected:
  void _begin_pass(int64_t pass) override { inner_->begin_pass(pass); }
  std::optional<Datapoint> _next() override { return inner_->next(); }

 private:
  DataFlowPtr inner_;
};

// Batches of 8 with the remainder: 13 batches, so that 2 ranks get 7 and 6, one of them short.
DataFlowPtr validation_set(bool seekable) {
  DataFlowPtr batches = std::make_shared<BatchData>(
      std::make_shared<DataFromList>(make_points(101, 0.5f)), 8, /*remainder=*/true);
  if (!seekable) return std::make_shared<NoSeek>(batches);
  return batches;
}

std::vector<InferencerPtr> inferencers(const std::string& prefix, const std::string& error) {
  return {std::make_shared<ScalarStats>(std::vector<std::string>{"cost"}, prefix),
          std::make_shared<ClassificationError>("wrong", error)};
}

// A user's inferencer that does not implement the partial sums.
class MeanAbs : public Inferencer {
 protected:
  void _before_inference() override { sum_ = 0; }
  std::vector<std::string> _get_fetches() override { return {"cost"}; }
  void _on_fetches(const std::vector<at::Tensor>& r) override { sum_ += r[0].item<double>(); }
  Stats _after_inference() override { return {{"mean_abs", sum_}}; }
  double sum_ = 0;
};

}  // namespace inference_worker

// The program's main, run by trainpack_test_programs (tests/programs/main.cpp) when it is started
// as trainpack_inference_worker.
int inference_worker_main(int argc, char** argv) {
  using namespace inference_worker;  // NOLINT(google-build-using-namespace): its own helpers
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <log dir> <learning rate> [epochs] [mode]\n", argv[0]);
    return 2;
  }
  try {
    const double lr = std::stod(argv[2]);
    const int64_t epochs = argc > 3 ? std::stoll(argv[3]) : 2;
    torch::manual_seed(7);
    torch::set_num_threads(1);
    auto group =
        ProcessGroup::from_environment(DistributedOptions().timeout(std::chrono::seconds(20)));
    logger::set_logger_dir(argv[1], 'd');

    DataFlowPtr flow = std::make_shared<DataFromList>(make_points(96, 0.0f),
                                                      DataFromListOptions().shuffle(true).seed(3));
    flow = std::make_shared<ShardData>(flow, group->rank(), group->world_size());
    flow = std::make_shared<BatchData>(flow, 16 / group->world_size());

    Net net;
    DataParallelTrainer trainer(group);
    trainer.setup_graph(
        {InputDesc("x", {-1, 3}), InputDesc("y", {-1, 1})}, std::make_shared<FeedInput>(flow),
        net.ptr(),
        [&](TowerContext& ctx, const std::vector<at::Tensor>& in) {
          const at::Tensor pred = net->forward(in[0]);
          auto cost = torch::mse_loss(pred, in[1]);
          ctx.output("cost", cost);
          // A sign error, one entry per sample.
          ctx.output("wrong", pred.gt(0).ne(in[1].gt(0)).to(at::kFloat).view({-1}));
          ctx.add_moving_summary("cost", cost);
          ctx.add_moving_summary("abs_err", (pred - in[1]).abs().mean());
          return cost;
        },
        [&] { return std::make_unique<torch::optim::SGD>(net->parameters(), lr); });

    std::vector<CallbackPtr> callbacks;
    callbacks.push_back(std::make_shared<InferenceRunner>(
        validation_set(true), inferencers("whole", "whole_error"),
        InferenceRunnerOptions().shard_over_ranks(false).progress_bar(false)));
    std::vector<InferencerPtr> sharded = inferencers("validation", "validation_error");
    const std::string mode = argc > 4 ? argv[4] : "plain";
    if (mode == "no-partial-sums") sharded.push_back(std::make_shared<MeanAbs>());
    callbacks.push_back(
        std::make_shared<InferenceRunner>(validation_set(mode != "unseekable"), sharded,
                                          InferenceRunnerOptions().progress_bar(false)));
    const int64_t rank = group->rank();
    callbacks.push_back(
        std::make_shared<CallbackFactory>(
            CallbackFactoryOptions().trigger([rank](CallbackFactory& cb) {
              for (const auto& m : cb.trainer().tower_registry().moving_averages()) {
                std::printf("local rank=%lld epoch=%lld %s=%.17g\n", static_cast<long long>(rank),
                            static_cast<long long>(cb.epoch_num()), m.name.c_str(),
                            m.average().item<double>());
              }
              std::fflush(stdout);
            }))
            ->set_chief_only(false));
    // The default monitors on every rank: the trainer skips them on the others, which write
    // nothing.
    trainer.train_with_defaults(
        TrainOptions().callbacks(callbacks).steps_per_epoch(6).max_epoch(epochs));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainpack_inference_worker: %s\n", e.what());
    return 1;
  }
}
