// InferenceRunner's errors in a round: a failure while reading or running a validation batch
// names the batch ("validation batch 3 of 40"), with the cause nested and no LibTorch backtrace.
#include "trainpack/callbacks/inference_runner.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainpack/core/exceptions.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/print_exception.h"

namespace trainpack {
namespace inference_runner_errors_test {

struct NetImpl : torch::nn::Cloneable<NetImpl> {
  NetImpl() { reset(); }
  void reset() override { fc = register_module("fc", torch::nn::Linear(2, 3)); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

// `n` points of 3 classes; the point at `bad` (if any) has the label 7, which the tower's
// cross-entropy refuses ("Target 7 is out of bounds").
std::vector<Datapoint> points(int64_t n, int64_t bad = -1) {
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({n, 2});
  std::vector<Datapoint> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back({x[i].clone(), torch::tensor(i == bad ? int64_t{7} : i % 3)});
  }
  return out;
}

// A SimpleTrainer with a linear classifier, 2 steps per epoch.
struct TrainerSetup {
  Net net;
  SimpleTrainer trainer;
  TrainerSetup() {
    net = Net();
    trainer.set_handle_signals(false);
    auto params = net->parameters();
    trainer.setup_graph(
        {InputDesc("x", {-1, 2}), InputDesc("label", {-1}, at::kLong)},
        std::make_shared<FeedInput>(
            std::make_shared<BatchData>(std::make_shared<DataFromList>(points(8)), 4)),
        net.ptr(),
        [](TowerContext& ctx, const std::vector<at::Tensor>& in) {
          const at::Tensor logits = ctx.module_as<NetImpl>().fc(in[0]);
          const at::Tensor cost = torch::nn::functional::cross_entropy(logits, in[1]);
          ctx.output("val-cost", cost);
          return cost;
        },
        [params] { return std::make_unique<torch::optim::SGD>(params, 0.1); });
  }
};

// Trains one epoch of 2 steps with `runner` and returns the exception's description.
std::string failure_of(TrainerSetup& s, const CallbackPtr& runner) {
  try {
    s.trainer.train({runner}, {}, 2, 1, 1);
  } catch (const std::exception& e) {
    return describe_exception(e);
  }
  return "<no exception>";
}

size_t count_lines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
}

// 80 validation points in batches of 2: 40 batches, the 3rd holding points 4 and 5.
TEST(InferenceRunnerErrors, ABatchThatTheDataflowCannotProduceIsNamed) {
  TrainerSetup s;
  auto flow = std::make_shared<MapData>(std::make_shared<DataFromList>(points(80, /*bad=*/5)),
                                        [](Datapoint dp) -> std::optional<Datapoint> {
                                          if (dp[1].item<int64_t>() == 7)
                                            throw std::runtime_error("label 7 is not a class");
                                          return dp;
                                        });
  auto runner = std::make_shared<InferenceRunner>(std::make_shared<BatchData>(flow, 2),
                                                  std::make_shared<ScalarStats>("val-cost"),
                                                  InferenceRunnerOptions().progress_bar(false));
  const std::string text = failure_of(s, runner);
  EXPECT_EQ(text,
            "error (CallbackError): Callback InferenceRunner failed in trigger_epoch: "
            "InferenceRunner: "
            "validation batch 3 of 40 failed: label 7 is not a class\n"
            "  caused by (std::runtime_error): InferenceRunner: validation batch 3 of 40 failed: "
            "label 7 is not a class\n"
            "  caused by (std::runtime_error): label 7 is not a class");
  EXPECT_EQ(s.trainer.global_step(), 2);  // the round at the end of the first epoch
}

// LibTorch refuses a value of the 3rd batch in the tower: the batch is named, LibTorch's error is
// the cause, and no line is LibTorch's backtrace.
TEST(InferenceRunnerErrors, ABatchThatTheTowerRefusesIsNamedWithoutABacktrace) {
  for (const bool parallel : {false, true}) {
    SCOPED_TRACE(parallel ? "DataParallelInferenceRunner" : "InferenceRunner");
    TrainerSetup s;
    auto batches =
        std::make_shared<BatchData>(std::make_shared<DataFromList>(points(80, /*bad=*/4)), 2);
    auto stats = std::make_shared<ScalarStats>("val-cost");
    CallbackPtr runner;
    if (parallel) {
      runner = std::make_shared<DataParallelInferenceRunner>(
          batches, std::vector<InferencerPtr>{stats},
          std::vector<c10::Device>{c10::kCPU, c10::kCPU},
          InferenceRunnerOptions().progress_bar(false));
    } else {
      runner = std::make_shared<InferenceRunner>(batches, stats,
                                                 InferenceRunnerOptions().progress_bar(false));
    }
    const std::string who = parallel ? "DataParallelInferenceRunner" : "InferenceRunner";
    const std::string text = failure_of(s, runner);
    EXPECT_EQ(text.rfind("error (CallbackError): Callback " + who + " failed in trigger_epoch: " +
                             who + ": validation batch 3 of 40 failed: ",
                         0),
              0u)
        << text;
    // c10::IndexError, a c10::Error, in 1.13.
    EXPECT_NE(text.find("\n  caused by (c10::"), std::string::npos) << text;
    EXPECT_NE(text.find("out of bounds"), std::string::npos) << text;
    EXPECT_EQ(text.find("frame #"), std::string::npos) << text;
    EXPECT_EQ(count_lines(text), 3u) << text;
  }
}

}  // namespace inference_runner_errors_test
}  // namespace trainpack
