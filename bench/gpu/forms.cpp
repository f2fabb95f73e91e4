// The C++ forms of trainpack_bench_gpu: the bare loop and the trainer (forms.h).
#include "gpu/forms.h"

#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fashion_mnist/model.h"
#include "support.h"
#include "trainpack/train/cuda_graph.h"
#include "trainpack/trainpack.h"

namespace trainpack::bench_gpu {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point start, Clock::time_point end, int64_t steps) {
  return std::chrono::duration<double, std::milli>(end - start).count() /
         static_cast<double>(steps);
}

// The main job's model and optimizer with the bare loop's tower: the mean cross-entropy, and its
// moving summary "cost" as the main job publishes it. The main job's tower also computes the
// top-1 and top-5 errors (and their moving summaries), which the bare loop does not: that work
// belongs to the model, not to the framework, so it is left out of both.
class BenchModel : public fashion_mnist::Model {
 public:
  using fashion_mnist::Model::Model;

  at::Tensor build_graph(trainpack::TowerContext& ctx,
                         const std::vector<at::Tensor>& inputs) override {
    at::Tensor cost = torch::nn::functional::cross_entropy(
        ctx.module_as<fashion_mnist::NetImpl>().forward(inputs[0]), inputs[1]);
    ctx.add_moving_summary("cost", cost);
    return cost;
  }
};

// Times steps warmup+1 .. warmup+steps of the epoch: the clock starts after the trigger_step of
// step `warmup` (at before_epoch when warmup is 0) and stops after the trigger_step of step
// warmup+steps, each time after waiting for the device, so that the window holds whole steps (the
// callbacks' hooks included) and the GPU work queued by them.
class TimedWindow : public trainpack::Callback {
 public:
  TimedWindow(int64_t warmup, int64_t steps, c10::Device device)
      : warmup_(warmup), steps_(steps), device_(device) {}

  // The time per timed step; nullopt when training ended before the window closed.
  std::optional<double> ms_per_step() const {
    if (!stopped_) return std::nullopt;
    return ms_between(start_, stop_, steps_);
  }

 protected:
  void _before_epoch() override {
    if (warmup_ == 0) start();
  }
  void _trigger_step() override {
    ++done_;
    if (done_ == warmup_) start();
    if (done_ == warmup_ + steps_) {
      synchronize(device_);
      stop_ = Clock::now();
      stopped_ = true;
    }
  }

 private:
  void start() {
    synchronize(device_);
    start_ = Clock::now();
  }

  int64_t warmup_, steps_;
  c10::Device device_;
  int64_t done_ = 0;
  bool stopped_ = false;
  Clock::time_point start_, stop_;
};

}  // namespace

void synchronize(c10::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

Measured run_bare_cpp(const Setup& setup) {
  torch::manual_seed(setup.seed);
  fashion_mnist::Model model(setup.lr, setup.weight_decay);
  fashion_mnist::Net& net = model.net();
  net->to(setup.device);
  net->train();
  // Built after the move, as the trainer does: its momentum buffers live on the device.
  std::unique_ptr<torch::optim::Optimizer> optimizer = model.optimizer();
  const auto count = static_cast<int64_t>(setup.batches.size());
  at::Tensor loss;
  auto step = [&](int64_t i) {
    const auto k = static_cast<size_t>(i % count);
    const Datapoint& batch = setup.batches[k];
    loss = torch::nn::functional::cross_entropy(net->forward(batch[0]), batch[1]);
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
  };
  for (int64_t i = 0; i < setup.warmup; ++i) step(i);
  synchronize(setup.device);
  const auto start = Clock::now();
  for (int64_t i = setup.warmup; i < setup.warmup + setup.steps; ++i) step(i);
  synchronize(setup.device);
  const auto stop = Clock::now();
  return {ms_between(start, stop, setup.steps), loss.item<double>(), ""};
}

Measured run_trainpack(const Setup& setup, bool cuda_graph) {
  // A fresh logger directory per run: the monitors (TFEventWriter, JSONWriter) write real files,
  // and hyper.txt would be looked for there.
  bench::ScratchLoggerDir dir("trainpack_bench_gpu");
  torch::manual_seed(setup.seed);
  auto model = std::make_shared<BenchModel>(setup.lr, setup.weight_decay);
  auto window = std::make_shared<TimedWindow>(setup.warmup, setup.steps, setup.device);
  // The main job's callbacks other than validation and checkpoints (InferenceRunner, ModelSaver,
  // MinSaver) and its own bookkeeping (EpochSummary, RunFlags): those run at epoch ends only,
  // which are outside the timed window. The schedule holds one point, so the learning rate does
  // not change during the run (with the graph, a change would capture the step again).
  std::vector<CallbackPtr> callbacks{
      std::make_shared<ScheduledHyperParamSetter>(
          "learning_rate", ScheduledHyperParamSetter::Schedule{{0, setup.lr}}),
      std::make_shared<HumanHyperParamSetter>("learning_rate"),
      std::make_shared<EstimatedTimeLeft>(),
      std::make_shared<ThroughputTracker>(static_cast<double>(setup.batch_size)),
      std::make_shared<GPUUtilizationTracker>(),
      std::make_shared<InjectShell>(),
      window,
  };
  auto input = std::make_shared<FeedInput>(std::make_shared<DataFromList>(setup.batches));
  TrainConfig config = TrainConfig()
                           .model(model)
                           .data(input)
                           .callbacks(callbacks)
                           .steps_per_epoch(setup.warmup + setup.steps)
                           .max_epoch(1);
  if (cuda_graph) config.cuda_graph(CudaGraphOptions());
  SimpleTrainer trainer(setup.device);
  launch_train_with_config(config, trainer);
  if (trainer.received_signal() != 0) {
    throw std::runtime_error(fmt::format("stopped by signal {}", trainer.received_signal()));
  }
  const std::optional<double> ms = window->ms_per_step();
  if (!ms) {
    throw std::runtime_error(fmt::format("training ended after {} of the {} steps",
                                         trainer.global_step(), setup.warmup + setup.steps));
  }
  double final_loss = std::numeric_limits<double>::quiet_NaN();
  try {
    final_loss = trainer.monitors().get_latest("cost");
  } catch (const std::out_of_range&) {
  }
  std::string fields;
  if (cuda_graph) {
    const CudaGraphStep* graph = trainer.cuda_graph_step();
    fields = graph == nullptr ? " graph=eager_fallback"
                              : fmt::format(" graph={} captures={} replays={}",
                                            graph->fell_back() ? "fell_back" : "replayed",
                                            graph->captures(), graph->replays());
  }
  return {*ms, final_loss, fields};
}

}  // namespace trainpack::bench_gpu
