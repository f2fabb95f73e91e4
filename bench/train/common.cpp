// The shared part of trainpack_bench_train (common.h): operator new counted, the model, the
// counters, the bare loop and the trainer forms.
#include "train/common.h"

#include <malloc.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <sstream>
#include <utility>

#include "support.h"
#include "trainpack/callbacks/inference_runner.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/input/input_source.h"
#include "trainpack/train/defaults.h"
#include "trainpack/utils/logger.h"

// ---- operator new, counted (process-wide, relaxed: a count, not a synchronisation) ----

namespace {
std::atomic<uint64_t> g_news{0};
}  // namespace

// noinline: inlined into a caller, GCC 12 takes the free() for a mismatched deallocation of the
// pointer from `new` (-Wmismatched-new-delete).
__attribute__((noinline)) void* operator new(std::size_t size) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace trainpack::bench {

// ---- the model ----

void NetImpl::reset() {
  conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)));
  conv2 =
      register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)));
  fc = register_module("fc", torch::nn::Linear(16 * 7 * 7, 10));
}

torch::Tensor NetImpl::forward(torch::Tensor x) {
  x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
  x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
  return fc->forward(x.flatten(1));
}

Net make_net() {
  torch::manual_seed(1);
  return Net();
}

void Results::add(const char* key, double value) {
  char line[128];
  std::snprintf(line, sizeof line, "%s=%.4f", key, value);
  lines.emplace_back(line);
}

// ---- counters and timed runs ----

Counters Counters::now() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + 1e-6 * static_cast<double>(tv.tv_usec);
  };
  return {g_news.load(std::memory_order_relaxed), usage.ru_minflt,
          seconds(usage.ru_utime) + seconds(usage.ru_stime)};
}

Run make_run(Clock::time_point start, Clock::time_point end, Counters c0, Counters c1,
             int64_t steps) {
  Run r;
  r.seconds = std::chrono::duration<double>(end - start).count();
  r.steps = steps;
  r.news_per_step = static_cast<double>(c1.news - c0.news) / static_cast<double>(steps);
  r.faults_per_step = static_cast<double>(c1.minflt - c0.minflt) / static_cast<double>(steps);
  r.cores = (c1.cpu_seconds - c0.cpu_seconds) / r.seconds;
  return r;
}

double Series::median_rate() const {
  std::vector<double> v;
  for (const auto& r : runs) v.push_back(r.rate());
  return median(v);
}

double Series::max_rate() const {
  double m = 0;
  for (const auto& r : runs) m = std::max(m, r.rate());
  return m;
}

double Series::min_seconds() const {
  double m = runs.empty() ? 0 : runs[0].seconds;
  for (const auto& r : runs) m = std::min(m, r.seconds);
  return m;
}

double Series::median_of(double Run::*field) const {
  std::vector<double> v;
  for (const auto& r : runs) v.push_back(r.*field);
  return median(v);
}

void print_header() {
  std::printf("%-42s %9s %9s %9s %11s %6s %9s\n", "form", "steps/s", "max", "new/step",
              "faults/step", "cores", "end ms/ep");
}

void print_row(const char* label, const Series& s) {
  std::printf("%-42s %9.2f %9.2f %9.1f %11.1f %6.2f %9.2f\n", label, s.median_rate(), s.max_rate(),
              s.news(), s.faults(), s.cores(), s.epoch_end_ms());
}

// ---- the data ----

std::vector<Datapoint> make_batches(int64_t count, int64_t batch_size, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<Datapoint> batches;
  for (int64_t i = 0; i < count; ++i) {
    batches.push_back(
        {torch::rand({batch_size, 1, 28, 28}), torch::randint(10, {batch_size}, torch::kLong)});
  }
  return batches;
}

volatile double g_sink = 0;
void busy(int64_t iterations) {
  double x = 1.0;
  for (int64_t i = 0; i < iterations; ++i) x = std::sqrt(x + static_cast<double>(i & 1023));
  g_sink = x;
}

// ---- the bare loops: (a), (s), (c), (v) ----

namespace {

// The hand-written counterpart of InferenceRunner + {ScalarStats, ClassificationError}.
ValStats evaluate_bare(Net& net, const std::vector<Datapoint>& val) {
  net->eval();
  torch::NoGradGuard no_grad;
  double cost_sum = 0;
  double wrong = 0;
  int64_t total = 0;
  for (const Datapoint& batch : val) {
    torch::Tensor logits = net->forward(batch[0]);
    cost_sum += torch::nn::functional::cross_entropy(logits, batch[1]).item<double>();
    torch::Tensor w = logits.argmax(1).ne(batch[1]).to(torch::kFloat);
    wrong += w.sum().item<double>();
    total += w.size(0);
  }
  net->train();
  return {total == 0 ? 0.0 : wrong / static_cast<double>(total),
          cost_sum / static_cast<double>(val.size())};
}

}  // namespace

Run run_bare(const std::vector<Datapoint>& batches, int64_t steps, int64_t busy_iterations,
             const std::vector<Datapoint>* val, int64_t steps_per_epoch, ValStats* stats) {
  Net net = make_net();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(kLr));
  double eval_seconds = 0;
  int64_t rounds = 0;
  const Counters c0 = Counters::now();
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    const Datapoint& batch = batches[static_cast<size_t>(i) % batches.size()];
    if (busy_iterations > 0) busy(busy_iterations);
    torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(batch[0]), batch[1]);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (val != nullptr && (i + 1) % steps_per_epoch == 0) {
      const auto t0 = Clock::now();
      const ValStats s = evaluate_bare(net, *val);
      eval_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      ++rounds;
      if (stats != nullptr) *stats = s;
    }
  }
  const auto end = Clock::now();
  Run run = make_run(start, end, c0, Counters::now(), steps);
  if (rounds > 0) run.epoch_end_ms = 1e3 * eval_seconds / static_cast<double>(rounds);
  return run;
}

// ---- SimpleTrainer: (b), (d), (e), (w) and case dp ----

namespace {

// Registered as the last monitor, so after every callback: its before_epoch of the
// first epoch comes right before the first step, its trigger_epoch after all of an
// epoch's end work. It also adds up the time from the end of each epoch's last step
// (its trigger_step, after every callback's) to the end of the epoch's work (its
// trigger_epoch): the epoch-end cost.
class LoopTimer : public trainpack::MonitorBase {
 public:
  Clock::time_point start, end;
  Counters c_start, c_end;
  double epoch_end_seconds = 0;

 protected:
  void _before_epoch() override {
    if (epoch_num() == 1) {
      c_start = Counters::now();
      start = Clock::now();
    }
  }
  void _trigger_step() override {
    if (local_step() == trainer().steps_per_epoch() - 1) last_step_end_ = Clock::now();
  }
  void _trigger_epoch() override {
    end = Clock::now();
    c_end = Counters::now();
    epoch_end_seconds += std::chrono::duration<double>(end - last_step_end_).count();
  }

 private:
  Clock::time_point last_step_end_;
};

}  // namespace

void ThreadProbe::record(const std::string& tower) {
  const int n = at::get_num_threads();
  std::lock_guard<std::mutex> lock(mutex_);
  int& seen = threads_[tower];
  seen = std::max(seen, n);
}

std::string ThreadProbe::describe() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  for (const auto& [name, n] : threads_) out << (out.tellp() > 0 ? " " : "") << name << "=" << n;
  return out.str();
}

InputSignature signature() {
  return {trainpack::InputDesc("image", {-1, 1, 28, 28}),
          trainpack::InputDesc("label", {-1}, at::kLong)};
}

std::function<std::unique_ptr<torch::optim::Optimizer>()> sgd_for(Net net) {
  return [net] {
    return std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(kLr));
  };
}

void exit_on_signal(const trainpack::SimpleTrainer& trainer) {
  if (trainer.received_signal() != 0) {
    std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
  }
}

trainpack::TowerFunc validation_tower(std::shared_ptr<ThreadProbe> probe) {
  return [probe](trainpack::TowerContext& ctx, const std::vector<at::Tensor>& in) {
    auto& net = ctx.module_as<NetImpl>();
    torch::Tensor logits = net.forward(in[0]);
    torch::Tensor cost = torch::nn::functional::cross_entropy(logits, in[1]);
    if (ctx.is_main_training_tower()) ctx.add_moving_summary("cost", cost);
    if (!ctx.is_training()) {
      if (probe) probe->record(ctx.name());
      ctx.output("cost", cost);
      ctx.output("wrong", logits.argmax(1).ne(in[1]).to(torch::kFloat));
    }
    return cost;
  };
}

std::vector<trainpack::InferencerPtr> validation_inferencers() {
  return {std::make_shared<trainpack::ScalarStats>(std::vector<std::string>{"cost"}),
          std::make_shared<trainpack::ClassificationError>("wrong", "val-error")};
}

ValStats latest_val_stats(const trainpack::SimpleTrainer& trainer) {
  return {trainer.monitors().get_latest("val-error"),
          trainer.monitors().get_latest("validation_cost")};
}

// (b), (d), (e); with `val` not null, (w): the runner on `val` at every epoch end,
// whose last round's result goes to `stats`.
Run run_trainer(const DataFlowPtr& data, Input input, int64_t steps_per_epoch, int64_t epochs,
                const std::vector<Datapoint>* val, ValStats* stats) {
  ScratchLoggerDir dir("trainpack_bench_train");
  Net net = make_net();
  trainpack::SimpleTrainer trainer;
  trainpack::InputSourcePtr source;
  if (input == Input::kFeed) {
    source = std::make_shared<trainpack::FeedInput>(data);
  } else {
    source = std::make_shared<trainpack::QueueInput>(data);
  }
  trainpack::TowerFunc tower;
  std::vector<trainpack::CallbackPtr> callbacks;
  if (val == nullptr) {
    // Cases train and queue keep the tower of their figures in BENCHMARKS.md.
    tower = [net](trainpack::TowerContext& ctx, const std::vector<at::Tensor>& in) mutable {
      torch::Tensor cost = torch::nn::functional::cross_entropy(net->forward(in[0]), in[1]);
      ctx.add_moving_summary("cost", cost);
      return cost;
    };
  } else {
    tower = validation_tower(nullptr);
    callbacks.push_back(std::make_shared<trainpack::InferenceRunner>(
        std::make_shared<trainpack::DataFromList>(*val), validation_inferencers()));
  }
  trainer.setup_graph(signature(), source, net.ptr(), tower, sgd_for(net));
  auto timer = std::make_shared<LoopTimer>();
  std::vector<trainpack::MonitorPtr> monitors = trainpack::DEFAULT_MONITORS();
  monitors.push_back(timer);
  trainer.train_with_defaults(trainpack::TrainOptions()
                                  .callbacks(callbacks)
                                  .monitors(monitors)
                                  .steps_per_epoch(steps_per_epoch)
                                  .max_epoch(epochs));
  exit_on_signal(trainer);
  Run run = make_run(timer->start, timer->end, timer->c_start, timer->c_end, trainer.global_step());
  run.epoch_end_ms = 1e3 * timer->epoch_end_seconds / static_cast<double>(epochs);
  if (stats != nullptr) *stats = latest_val_stats(trainer);
  return run;
}

}  // namespace trainpack::bench
