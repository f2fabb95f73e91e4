// trainpack_bench_train: what the trainer costs on a real (small) training step, and whether
// QueueInput hides the cost of the data.
//
// The model is a small CNN (conv 1->8 3x3, relu, maxpool 2, conv 8->16 3x3, relu, maxpool 2,
// linear 784->10) trained with SGD on Fashion-MNIST-shaped batches ([B, 1, 28, 28] float, [B]
// int64 labels) generated once, in memory, before anything is timed.
//
// Case 1, the framework against a bare loop (`--threads` intra-op threads, default 2):
//   (a) a hand-written LibTorch loop: forward, cross_entropy, zero_grad, backward, step;
//   (b) SimpleTrainer with DEFAULT_CALLBACKS() and DEFAULT_MONITORS() (logging into a fresh
//       temporary directory, so TFEventWriter and JSONWriter write real files), the tower
//       publishing one moving summary (ctx.add_moving_summary("cost", cost)), FeedInput over a
//       DataFromList of the same batches.
// Case 2, data that costs about as much as the step (1 intra-op thread, so that on 2 cores the
// prefetch thread has a core of its own): a MapData whose function busy-computes on the CPU for
// about one step time (calibrated at start), over the same batches:
//   (s) the step alone (bare loop, 1 thread), (t) the data alone (the map function in a loop),
//   (c) a bare loop producing each batch inline, then stepping (the two costs add up),
//   (d) SimpleTrainer + FeedInput (the same, plus the framework),
//   (e) SimpleTrainer + QueueInput (the data is produced on the prefetch thread meanwhile).
//
// Timing: steady_clock. A trainer form is timed from the first epoch's before_epoch to the last
// epoch's trigger_epoch, seen by a monitor registered after every other callback: all steps and
// all epoch-end work (summaries, stats.json, event-file flush) are inside, the setup (building
// the optimizer, creating the files, starting the thread) and after_train are not. After a
// warm-up run of every form, the forms run interleaved in every rep ((a), (b), (a), (b), ...) so
// that drift in the machine's speed hits them alike; the median rate over the reps is reported.
// Also printed (medians over the reps): operator new calls and minor page faults per step, which
// show what the framework allocates per step on top of LibTorch's own work, `cores`, the
// process's CPU time over the wall time (process-wide counters), and for the trainer forms the
// epoch-end work per epoch (from the end of the epoch's last step to the end of its
// trigger_epoch: summaries, stats.json, the event file's flush and fsync). In case 2, (e) can reach
// the slower rate only with `cores` near 2: on a machine whose other core is busy with other work,
// the prefetch thread has nowhere to run and (e) falls back to the sum of the two costs.
//
// The allocator (`--malloc`, default `tuned`): with glibc's default settings, whether a step's
// activation buffers are returned to the OS and faulted back in at the next step depends on the
// heap's layout, which differs from one form to the other and from run to run (measured here:
// 30 or 1,000 minor faults per step for the same form, and up to 20% of the step time), so it
// would be measured instead of the framework. `tuned` fixes the thresholds before anything is
// allocated, mallopt(M_MMAP_THRESHOLD, 32 MiB) and mallopt(M_TRIM_THRESHOLD, 256 MiB): buffers
// stay in the heap and no form faults per step. `default` leaves glibc alone.
//
// Last lines: `queue_over_slower=<rate (e) / min(rate (s), rate (t))>` (target >= 0.9: with
// QueueInput the step rate stays within 10% of the slower of step and data, not their sum) and,
// as the very last line, `trainer_over_bare=<rate (b) / rate (a)>` (target >= 0.99).
//
//   trainpack_bench_train [--steps N] [--steps-per-epoch M] [--reps R] [--threads T]
//                         [--batch-size B] [--queue-steps Q] [--skip-queue]
//                         [--malloc tuned|default]
#include <torch/torch.h>

#include <malloc.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "trainpack/callbacks/monitor_base.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/train/defaults.h"
#include "trainpack/train/single_cost.h"
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

namespace {

using Clock = std::chrono::steady_clock;
using trainpack::Datapoint;

// ---- the model ----

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)))),
        conv2(register_module("conv2",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(16 * 7 * 7, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    return fc->forward(x.flatten(1));
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

constexpr double kLr = 0.01;

// A fresh model with the same initial weights every time (so every form does the same work).
Net make_net() {
  torch::manual_seed(1);
  return Net();
}

// ---- counters ----

// Process-wide (every thread): operator new calls, minor page faults, CPU time.
struct Counters {
  uint64_t news = 0;
  long minflt = 0;
  double cpu_seconds = 0;
  static Counters now() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& tv) {
      return static_cast<double>(tv.tv_sec) + 1e-6 * static_cast<double>(tv.tv_usec);
    };
    return {g_news.load(std::memory_order_relaxed), usage.ru_minflt,
            seconds(usage.ru_utime) + seconds(usage.ru_stime)};
  }
};

// One timed run of a form.
struct Run {
  double seconds = 0;
  int64_t steps = 0;
  double news_per_step = 0;
  double faults_per_step = 0;
  double cores = 0;         // CPU time / wall time: the cores the process actually got
  double epoch_end_ms = 0;  // trainer forms: the epoch-end work, per epoch
  double rate() const { return static_cast<double>(steps) / seconds; }
};

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

// ---- the data ----

std::vector<Datapoint> make_batches(int64_t count, int64_t batch_size) {
  torch::manual_seed(0);
  std::vector<Datapoint> batches;
  for (int64_t i = 0; i < count; ++i) {
    batches.push_back(
        {torch::rand({batch_size, 1, 28, 28}), torch::randint(10, {batch_size}, torch::kLong)});
  }
  return batches;
}

// CPU work that takes a time proportional to `iterations` and that the compiler must keep.
volatile double g_sink = 0;
void busy(int64_t iterations) {
  double x = 1.0;
  for (int64_t i = 0; i < iterations; ++i) x = std::sqrt(x + static_cast<double>(i & 1023));
  g_sink = x;
}

// ---- (a), (s), (c): bare loops ----

// `busy_iterations` > 0: produce each batch inline first (form (c)).
Run run_bare(const std::vector<Datapoint>& batches, int64_t steps, int64_t busy_iterations = 0) {
  Net net = make_net();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(kLr));
  const Counters c0 = Counters::now();
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    const Datapoint& batch = batches[static_cast<size_t>(i) % batches.size()];
    if (busy_iterations > 0) busy(busy_iterations);
    torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(batch[0]), batch[1]);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  const auto end = Clock::now();
  return make_run(start, end, c0, Counters::now(), steps);
}

// (t): the data function alone.
Run run_data_alone(int64_t steps, int64_t busy_iterations) {
  const Counters c0 = Counters::now();
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) busy(busy_iterations);
  const auto end = Clock::now();
  return make_run(start, end, c0, Counters::now(), steps);
}

// ---- (b), (d), (e): SimpleTrainer ----

// Registered as the last monitor, so after every callback: its before_epoch of the first epoch
// comes right before the first step, its trigger_epoch after all of an epoch's end work.
// It also adds up the time from the end of each epoch's last step (its trigger_step, after every
// callback's) to the end of the epoch's work (its trigger_epoch): the epoch-end cost.
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

enum class Input { kFeed, kQueue };

Run run_trainer(const trainpack::DataFlowPtr& data, Input input, int64_t steps_per_epoch,
                int64_t epochs) {
  char dir_template[] = "/tmp/trainpack_bench_train.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("mkdtemp");
    std::exit(1);
  }
  const std::string dir = dir_template;
  trainpack::logger::set_logger_dir(dir, 'k');
  Run run;
  {
    Net net = make_net();
    trainpack::SimpleTrainer trainer;
    trainpack::InputSourcePtr source;
    if (input == Input::kFeed) {
      source = std::make_shared<trainpack::FeedInput>(data);
    } else {
      source = std::make_shared<trainpack::QueueInput>(data);
    }
    trainer.setup_graph(
        {trainpack::InputDesc("image", {-1, 1, 28, 28}),
         trainpack::InputDesc("label", {-1}, at::kLong)},
        source, net.ptr(),
        [net](trainpack::TowerContext& ctx, const std::vector<at::Tensor>& in) mutable {
          torch::Tensor cost = torch::nn::functional::cross_entropy(net->forward(in[0]), in[1]);
          ctx.add_moving_summary("cost", cost);
          return cost;
        },
        [net] {
          return std::make_unique<torch::optim::SGD>(net->parameters(),
                                                     torch::optim::SGDOptions(kLr));
        });
    auto timer = std::make_shared<LoopTimer>();
    std::vector<trainpack::MonitorPtr> monitors = trainpack::DEFAULT_MONITORS();
    monitors.push_back(timer);
    trainer.train_with_defaults(trainpack::TrainOptions()
                                    .monitors(monitors)
                                    .steps_per_epoch(steps_per_epoch)
                                    .max_epoch(epochs));
    if (trainer.received_signal() != 0) {
      std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
    }
    run = make_run(timer->start, timer->end, timer->c_start, timer->c_end, trainer.global_step());
    run.epoch_end_ms = 1e3 * timer->epoch_end_seconds / static_cast<double>(epochs);
  }
  trainpack::logger::unset_logger_dir();
  std::filesystem::remove_all(dir);
  return run;
}

// ---- statistics ----

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Series {
  std::vector<Run> runs;
  double median_rate() const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.rate());
    return median(v);
  }
  double max_rate() const {
    double m = 0;
    for (const auto& r : runs) m = std::max(m, r.rate());
    return m;
  }
  double news() const { return median_of(&Run::news_per_step); }
  double faults() const { return median_of(&Run::faults_per_step); }
  double cores() const { return median_of(&Run::cores); }
  double epoch_end_ms() const { return median_of(&Run::epoch_end_ms); }
  double median_of(double Run::*field) const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.*field);
    return median(v);
  }
};

void print_row(const char* label, const Series& s) {
  std::printf("%-42s %9.2f %9.2f %9.1f %11.1f %6.2f %9.2f\n", label, s.median_rate(), s.max_rate(),
              s.news(), s.faults(), s.cores(), s.epoch_end_ms());
}

void print_header() {
  std::printf("%-42s %9s %9s %9s %11s %6s %9s\n", "form", "steps/s", "max", "new/step",
              "faults/step", "cores", "end ms/ep");
}

int64_t parse_positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "%s: expected a positive integer, got '%s'\n", flag, text);
    std::exit(2);
  }
  return static_cast<int64_t>(v);
}

void usage(std::FILE* out, const char* argv0) {
  std::fprintf(out,
               "usage: %s [--steps N (default 1200)] [--steps-per-epoch M (default 300)] "
               "[--reps R (default 5)] [--threads T (default 2)] [--batch-size B (default 64)] "
               "[--queue-steps Q (default 400)] [--skip-queue] [--malloc tuned|default (default "
               "tuned)]\n",
               argv0);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 1200;
  int64_t steps_per_epoch = 300;
  int64_t reps = 5;
  int64_t threads = 2;
  int64_t batch_size = 64;
  int64_t queue_steps = 400;
  bool skip_queue = false;
  std::string malloc_mode = "tuned";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--skip-queue") {
      skip_queue = true;
    } else if (arg == "--malloc" && i + 1 < argc) {
      malloc_mode = argv[++i];
      if (malloc_mode != "tuned" && malloc_mode != "default") {
        std::fprintf(stderr, "--malloc: expected 'tuned' or 'default', got '%s'\n",
                     malloc_mode.c_str());
        return 2;
      }
    } else if ((arg == "--steps" || arg == "--steps-per-epoch" || arg == "--reps" ||
                arg == "--threads" || arg == "--batch-size" || arg == "--queue-steps") &&
               i + 1 < argc) {
      const int64_t v = parse_positive(arg.c_str(), argv[++i]);
      if (arg == "--steps") steps = v;
      if (arg == "--steps-per-epoch") steps_per_epoch = v;
      if (arg == "--reps") reps = v;
      if (arg == "--threads") threads = v;
      if (arg == "--batch-size") batch_size = v;
      if (arg == "--queue-steps") queue_steps = v;
    } else if (arg == "--help" || arg == "-h") {
      usage(stdout, argv[0]);
      return 0;
    } else {
      usage(stderr, argv[0]);
      return 2;
    }
  }
  if (malloc_mode == "tuned") {
    // Both calls also turn off glibc's dynamic threshold adjustment.
    if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 256 << 20) != 1) {
      std::fprintf(stderr, "mallopt failed; run with --malloc default\n");
      return 1;
    }
  }
  // Whole epochs: round the step counts up to a multiple of the epoch.
  const int64_t epochs = (steps + steps_per_epoch - 1) / steps_per_epoch;
  steps = epochs * steps_per_epoch;
  const int64_t queue_epochs = (queue_steps + steps_per_epoch - 1) / steps_per_epoch;
  queue_steps = queue_epochs * steps_per_epoch;

  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  const std::vector<Datapoint> batches = make_batches(16, batch_size);
  auto list = std::make_shared<trainpack::DataFromList>(batches);

  // ---- case 1 ----
  torch::set_num_threads(static_cast<int>(threads));
  std::printf(
      "train benchmark: CNN on [%lld, 1, 28, 28] batches, %lld intra-op threads, %lld "
      "steps (%lld epochs x %lld) per run, %lld reps, malloc %s\n",
      static_cast<long long>(batch_size), static_cast<long long>(torch::get_num_threads()),
      static_cast<long long>(steps), static_cast<long long>(epochs),
      static_cast<long long>(steps_per_epoch), static_cast<long long>(reps), malloc_mode.c_str());
  std::fflush(stdout);
  run_bare(batches, steps_per_epoch);  // warm-up
  run_trainer(list, Input::kFeed, steps_per_epoch, 1);
  Series bare, trainer;
  std::vector<double> ratios;
  for (int64_t r = 0; r < reps; ++r) {
    bare.runs.push_back(run_bare(batches, steps));
    trainer.runs.push_back(run_trainer(list, Input::kFeed, steps_per_epoch, epochs));
    ratios.push_back(trainer.runs.back().rate() / bare.runs.back().rate());
    std::printf("rep %lld: (a) %.2f steps/s, (b) %.2f steps/s, (b)/(a) %.4f\n",
                static_cast<long long>(r), bare.runs.back().rate(), trainer.runs.back().rate(),
                ratios.back());
    std::fflush(stdout);
  }
  print_header();
  print_row("(a) bare LibTorch loop", bare);
  print_row("(b) SimpleTrainer + defaults + FeedInput", trainer);
  const double trainer_over_bare = trainer.median_rate() / bare.median_rate();
  std::printf("median of the per-rep ratios (b)/(a): %.4f\n", median(ratios));
  {
    // The same ratio with (b)'s epoch-end work taken out: what the per-step path costs.
    std::vector<double> step_rates;
    for (const auto& r : trainer.runs) {
      const double seconds = r.seconds - 1e-3 * r.epoch_end_ms * static_cast<double>(epochs);
      step_rates.push_back(static_cast<double>(r.steps) / seconds);
    }
    std::printf("(b) without its epoch-end work: %.2f steps/s, %.4f of (a)\n", median(step_rates),
                median(step_rates) / bare.median_rate());
  }

  // ---- case 2 ----
  if (!skip_queue) {
    torch::set_num_threads(1);
    std::printf(
        "\nqueue case: 1 intra-op thread (the prefetch thread gets the other core), %lld "
        "steps (%lld epochs x %lld) per run\n",
        static_cast<long long>(queue_steps), static_cast<long long>(queue_epochs),
        static_cast<long long>(steps_per_epoch));
    // Calibrate the data function to about one step time.
    run_bare(batches, steps_per_epoch);  // warm-up at 1 thread
    const double step_seconds = 1.0 / run_bare(batches, steps_per_epoch).rate();
    constexpr int64_t kProbe = 1 << 22;
    const auto t0 = Clock::now();
    busy(kProbe);
    const double probe_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const int64_t busy_iterations =
        std::max<int64_t>(1, static_cast<int64_t>(kProbe * step_seconds / probe_seconds));
    std::printf("step %.3f ms; data function: %lld sqrt iterations\n", 1e3 * step_seconds,
                static_cast<long long>(busy_iterations));

    auto mapped = std::make_shared<trainpack::MapData>(
        std::make_shared<trainpack::DataFromList>(batches),
        [busy_iterations](Datapoint dp) -> std::optional<Datapoint> {
          busy(busy_iterations);
          return dp;
        });
    run_trainer(mapped, Input::kFeed, steps_per_epoch, 1);  // warm-up
    run_trainer(mapped, Input::kQueue, steps_per_epoch, 1);
    Series step_alone, data_alone, inline_bare, feed, queue;
    for (int64_t r = 0; r < reps; ++r) {
      step_alone.runs.push_back(run_bare(batches, queue_steps));
      data_alone.runs.push_back(run_data_alone(queue_steps, busy_iterations));
      inline_bare.runs.push_back(run_bare(batches, queue_steps, busy_iterations));
      feed.runs.push_back(run_trainer(mapped, Input::kFeed, steps_per_epoch, queue_epochs));
      queue.runs.push_back(run_trainer(mapped, Input::kQueue, steps_per_epoch, queue_epochs));
      std::printf("rep %lld: (s) %.2f (t) %.2f (c) %.2f (d) %.2f (e) %.2f steps/s\n",
                  static_cast<long long>(r), step_alone.runs.back().rate(),
                  data_alone.runs.back().rate(), inline_bare.runs.back().rate(),
                  feed.runs.back().rate(), queue.runs.back().rate());
      std::fflush(stdout);
    }
    print_header();
    print_row("(s) step alone (bare, 1 thread)", step_alone);
    print_row("(t) data alone (map function)", data_alone);
    print_row("(c) bare loop, data inline", inline_bare);
    print_row("(d) SimpleTrainer + FeedInput", feed);
    print_row("(e) SimpleTrainer + QueueInput", queue);
    const double slower = std::min(step_alone.median_rate(), data_alone.median_rate());
    std::printf("feed_over_inline=%.4f\n", feed.median_rate() / inline_bare.median_rate());
    std::printf("queue_over_slower=%.4f\n", queue.median_rate() / slower);
  }
  std::printf("trainer_over_bare=%.4f\n", trainer_over_bare);
  return 0;
}
