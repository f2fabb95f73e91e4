// trainpack_bench_gradproc: the cost per step of each gradient processor, against the same
// SimpleTrainer step without processors, in one run.
//
// Model: an MLP 784-256-10 (~204k parameters, 4 tensors) on one in-memory batch of 64, SGD, one
// intra-op thread; only MergeAllSummaries as callback (at every epoch end, every 20 steps) and
// no monitor. Each variant trains 20 steps per epoch for `--epochs` epochs (default 100); the
// variants are interleaved over `--reps` rounds (default 3) and the median µs per step is
// printed per variant, with its excess over `none`. The last line is
// `gradproc_all_over_none=<median of all four processors / median of none>`.
//
//   trainpack_bench_gradproc [--reps R] [--epochs E]
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "trainpack/trainpack.h"

using namespace trainpack;  // NOLINT(google-build-using-namespace): a benchmark program

namespace {

double microseconds_per_step(const std::vector<GradientProcessorPtr>& processors, int64_t epochs) {
  constexpr int64_t kSteps = 20;
  torch::manual_seed(0);
  auto net = torch::nn::Sequential(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                                   torch::nn::Linear(256, 10));
  std::vector<Datapoint> points;
  for (int i = 0; i < 64 * kSteps; ++i) {
    points.push_back({torch::randn({784}), torch::tensor(static_cast<int64_t>(i % 10))});
  }
  auto batches = std::make_shared<BatchData>(std::make_shared<DataFromList>(points), 64);
  SimpleTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.setup_graph(
      {InputDesc("x", {-1, 784}), InputDesc("y", {-1}, at::kLong)},
      std::make_shared<FeedInput>(batches), net.ptr(),
      [net](TowerContext&, const std::vector<at::Tensor>& in) mutable {
        return torch::nn::functional::cross_entropy(net->forward(in[0]), in[1]);
      },
      [net] { return std::make_unique<torch::optim::SGD>(net->parameters(), 0.01); });
  trainer.set_gradient_processors(processors);
  const auto start = std::chrono::steady_clock::now();
  trainer.train({MergeAllSummaries()}, {}, kSteps, 1, epochs);
  const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
  return took.count() / static_cast<double>(kSteps * epochs);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 3;
  int64_t epochs = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::atoll(argv[i + 1]);
  }
  torch::set_num_threads(1);
  logger::set_level(logger::Level::kWarning);
  using Make = std::function<std::vector<GradientProcessorPtr>()>;
  const std::vector<std::pair<std::string, Make>> variants = {
      {"none", [] { return std::vector<GradientProcessorPtr>{}; }},
      {"GlobalNormClip",
       [] { return std::vector<GradientProcessorPtr>{std::make_shared<GlobalNormClip>(1.0)}; }},
      {"MapGradient(clamp)",
       [] {
         return std::vector<GradientProcessorPtr>{
             std::make_shared<MapGradient>([](const at::Tensor& g) { return g.clamp(-1, 1); })};
       }},
      {"SummaryGradient",
       [] { return std::vector<GradientProcessorPtr>{std::make_shared<SummaryGradient>()}; }},
      {"CheckGradient",
       [] { return std::vector<GradientProcessorPtr>{std::make_shared<CheckGradient>()}; }},
      {"all four",
       [] {
         return std::vector<GradientProcessorPtr>{
             std::make_shared<CheckGradient>(), std::make_shared<SummaryGradient>(),
             std::make_shared<MapGradient>([](const at::Tensor& g) { return g.clamp(-1, 1); }),
             std::make_shared<GlobalNormClip>(1.0)};
       }},
  };
  std::map<std::string, std::vector<double>> times;
  microseconds_per_step({}, 2);  // warm-up
  for (int r = 0; r < reps; ++r) {
    for (const auto& [name, make] : variants)
      times[name].push_back(microseconds_per_step(make(), epochs));
  }
  const double none = median(times["none"]);
  for (const auto& [name, make] : variants) {
    const double m = median(times[name]);
    fmt::print("{:<20} {:8.1f} us/step  (+{:.1f})\n", name, m, m - none);
  }
  fmt::print("gradproc_all_over_none={:.3f}\n", median(times["all four"]) / none);
  return 0;
}
