// trainpack_bench_distributed: the main job's model (examples/fashion_mnist/model.h) trained by
// DataParallelTrainer over c10d (Gloo), one side of the comparison with PyTorch's own
// DistributedDataParallel (bench/distributed/ddp_reference.py). bench/distributed/run.py launches
// everything in one run and prints the ratio; this program is one side at a time:
//
//   torchrun --standalone --nproc_per_node 2 --no_python --redirects 9:1 --tee 9:1
//       build/bench/trainpack_bench_distributed [--steps N] ...     DataParallelTrainer, 2 ranks
//   build/bench/trainpack_bench_distributed --single [--threads 2]  SimpleTrainer, one process
//   torchrun ... build/bench/trainpack_bench_distributed --allreduce  the all-reduce alone
//
// What runs, matched to ddp_reference.py:
// - the module and the optimizer of fashion_mnist::Model (SGD, Nesterov momentum 0.9, weight
//   decay; --lr 0.1 and --weight-decay 1e-4 as the main job); the tower is the mean
//   cross-entropy and its moving summary "cost" (the main job's tower also computes the top-1 and
//   top-5 errors, which the reference does not);
// - the data: the first `--batches` x `--batch-size` training images of Fashion-MNIST (or random
//   tensors of its shape, --random), batched once in memory before anything is timed, fed by
//   FeedInput from a DataFromList, cycled through. Global batch i is images [i*G, (i+1)*G); rank
//   r of W trains on its r-th part of G/W images (split here, not by a sharding dataflow, so
//   that no side's data path batches anything); --single trains on the whole global batch;
// - train_with_defaults (ProgressBar, the default monitors writing into a scratch directory),
//   logger level WARNING; trainpack::configure_runtime with --threads intra-op threads, 1
//   OpenBLAS thread, the tuned malloc (run.py gives the reference the same thresholds).
//
// Timing: a callback reads steady_clock at before_epoch and at every trigger_step (the end of a
// step, after every callback's after_run); a step's time is the difference to the previous
// reading, so each step's whole loop is inside. One epoch of --warmup + --steps steps; the
// warm-up steps are left out. Rank 0 (or the single process) prints, last,
//   result side=<trainpack|single> ranks=<W> global_batch=<G> steps=<N> median_step_ms=<m>
//   mean_step_ms=<a> cpu_ms_per_step=<c>
// (one line; cpu_ms_per_step: the process's CPU time, every thread, over the timed steps, per
// step: less sensitive than the wall time to other work on the machine).
// --allreduce: the process group's all_reduce_sum of a float tensor of the gradient's size (the
// model's parameters, 104,426 floats) and of 2^20 and 2^22 floats, each timed alone after a
// barrier, --reps times after 5 untimed ones; rank 0 prints per size
//   result side=allreduce floats=<n> bytes=<4n> median_ms=<m> min_ms=<m>
// and the same for the trainer's per-step stop vote (an all-reduce of one int64 per rank):
//   result side=vote longs=<W> median_ms=<m> min_ms=<m>
#include <time.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fashion_mnist/model.h"
#include "support.h"
#include "trainpack/trainpack.h"
#include "trainpack/utils/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  bool single = false;
  bool allreduce = false;
  bool random = false;
  int64_t batch_size = 128;  // global
  int64_t steps = 300;
  int64_t warmup = 30;
  int64_t threads = 1;
  int64_t batches = 64;
  int64_t reps = 50;
  double lr = 0.1;
  double weight_decay = 1e-4;
  std::string data = trainpack::kFashionMnistDir;
};

void usage(std::FILE* out, const char* argv0) {
  std::fprintf(out,
               "usage: %s [--single | --allreduce] [--batch-size G (global, 128)] [--steps N "
               "(300)] [--warmup W (30)] [--threads T per process (1)] [--batches K (64)] "
               "[--random | --data DIR] [--reps R (--allreduce, 50)] [--lr 0.1] "
               "[--weight-decay 1e-4]\n",
               argv0);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--single") {
      o.single = true;
    } else if (a == "--allreduce") {
      o.allreduce = true;
    } else if (a == "--random") {
      o.random = true;
    } else if (a == "--data" && has_value) {
      o.data = argv[++i];
    } else if ((a == "--lr" || a == "--weight-decay") && has_value) {
      const double v = std::atof(argv[++i]);
      (a == "--lr" ? o.lr : o.weight_decay) = v;
    } else if (a == "--warmup" && has_value) {
      o.warmup = std::string(argv[i + 1]) == "0"
                     ? (++i, 0)
                     : trainpack::bench::parse_positive(a.c_str(), argv[++i]);
    } else if ((a == "--batch-size" || a == "--steps" || a == "--threads" || a == "--batches" ||
                a == "--reps") &&
               has_value) {
      const int64_t v = trainpack::bench::parse_positive(a.c_str(), argv[++i]);
      if (a == "--batch-size") o.batch_size = v;
      if (a == "--steps") o.steps = v;
      if (a == "--threads") o.threads = v;
      if (a == "--batches") o.batches = v;
      if (a == "--reps") o.reps = v;
    } else if (a == "--help" || a == "-h") {
      usage(stdout, argv[0]);
      std::exit(0);
    } else {
      usage(stderr, argv[0]);
      std::exit(2);
    }
  }
  if (o.single && o.allreduce) {
    std::fprintf(stderr, "--single and --allreduce: pick one\n");
    std::exit(2);
  }
  return o;
}

// The `rank`-th of `world` parts of each of the first `count` global batches, as datapoints
// {images [G/W, 28, 28], labels [G/W]}.
std::vector<trainpack::Datapoint> make_batches(const Options& o, int64_t rank, int64_t world) {
  const int64_t images_needed = o.batches * o.batch_size;
  at::Tensor images, labels;
  if (o.random) {
    torch::manual_seed(42);
    images = torch::rand({images_needed, 28, 28});
    labels = torch::randint(10, {images_needed}, torch::kLong);
  } else {
    std::tie(images, labels) = trainpack::FashionMnist::read("train", o.data);
    if (images.size(0) < images_needed) {
      std::fprintf(stderr, "--batches %lld x --batch-size %lld: more than the %lld images\n",
                   static_cast<long long>(o.batches), static_cast<long long>(o.batch_size),
                   static_cast<long long>(images.size(0)));
      std::exit(2);
    }
  }
  const int64_t local = o.batch_size / world;
  std::vector<trainpack::Datapoint> out;
  for (int64_t i = 0; i < o.batches; ++i) {
    const int64_t start = i * o.batch_size + rank * local;
    out.push_back({images.slice(0, start, start + local).clone(),
                   labels.slice(0, start, start + local).clone()});
  }
  return out;
}

// steady_clock at before_epoch and at every trigger_step; the process's CPU time from the end of
// step `skip` to the epoch's end.
class StepClock : public trainpack::Callback {
 public:
  StepClock(int64_t steps, int64_t skip) : skip_(skip) {
    ticks_.reserve(static_cast<size_t>(steps) + 1);
  }
  // The CPU time per step after the first `skip`, in ms.
  double cpu_ms_per_step() const {
    return 1e3 * (cpu_end_ - cpu_start_) / static_cast<double>(ticks_.size() - 1 - skip_);
  }
  // The per-step times in ms, the first `skip` left out.
  std::vector<double> step_ms(int64_t skip) const {
    std::vector<double> out;
    for (size_t i = static_cast<size_t>(skip) + 1; i < ticks_.size(); ++i) {
      out.push_back(std::chrono::duration<double, std::milli>(ticks_[i] - ticks_[i - 1]).count());
    }
    return out;
  }

 protected:
  void _before_epoch() override {
    ticks_.push_back(Clock::now());
    if (skip_ == 0) cpu_start_ = cpu_seconds();
  }
  void _trigger_step() override {
    ticks_.push_back(Clock::now());
    if (ticks_.size() == static_cast<size_t>(skip_) + 1) cpu_start_ = cpu_seconds();
  }
  void _after_epoch() override { cpu_end_ = cpu_seconds(); }

 private:
  // The process's CPU time, every thread.
  static double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }

  int64_t skip_;
  double cpu_start_ = 0, cpu_end_ = 0;
  std::vector<Clock::time_point> ticks_;
};

struct Timing {
  std::vector<double> step_ms;
  double cpu_ms_per_step;
};

void print_result(const char* side, int64_t world, const Options& o, const Timing& timing) {
  const std::vector<double>& ms = timing.step_ms;
  double sum = 0;
  for (double v : ms) sum += v;
  std::printf(
      "result side=%s ranks=%lld global_batch=%lld steps=%zu median_step_ms=%.3f "
      "mean_step_ms=%.3f cpu_ms_per_step=%.3f\n",
      side, static_cast<long long>(world), static_cast<long long>(o.batch_size), ms.size(),
      trainpack::bench::median(ms), sum / static_cast<double>(ms.size()), timing.cpu_ms_per_step);
  std::fflush(stdout);
}

// Trains with `trainer` (SimpleTrainer or DataParallelTrainer) on `batches`; the step times.
Timing train(trainpack::SingleCostTrainer& trainer, const Options& o,
             std::vector<trainpack::Datapoint> batches) {
  trainpack::bench::ScratchLoggerDir dir("trainpack_bench_distributed");
  auto model = std::make_shared<fashion_mnist::Model>(o.lr, o.weight_decay);
  const trainpack::InputSignature signature = {trainpack::InputDesc("input", {-1, 28, 28}),
                                               trainpack::InputDesc("label", {-1}, at::kLong)};
  auto tower = [](trainpack::TowerContext& ctx, const std::vector<at::Tensor>& in) {
    at::Tensor cost = torch::nn::functional::cross_entropy(
        ctx.module_as<fashion_mnist::NetImpl>().forward(in[0]), in[1]);
    ctx.add_moving_summary("cost", cost);
    return cost;
  };
  auto source = std::make_shared<trainpack::FeedInput>(
      std::make_shared<trainpack::DataFromList>(std::move(batches)));
  trainer.setup_graph(signature, source, model->module(), tower,
                      [model] { return model->optimizer(); });
  const int64_t total = o.warmup + o.steps;
  auto clock = std::make_shared<StepClock>(total, o.warmup);
  trainer.train_with_defaults(
      trainpack::TrainOptions().callbacks({clock}).steps_per_epoch(total).max_epoch(1));
  if (trainer.received_signal() != 0) {
    std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
  }
  return {clock->step_ms(o.warmup), clock->cpu_ms_per_step()};
}

int run_single(const Options& o) {
  trainpack::SimpleTrainer trainer;
  print_result("single", 1, o, train(trainer, o, make_batches(o, 0, 1)));
  return 0;
}

int run_data_parallel(const Options& o) {
  auto pg = trainpack::ProcessGroup::from_environment(trainpack::DistributedOptions());
  const int64_t rank = pg->rank(), world = pg->world_size();
  if (o.batch_size % world != 0) {
    std::fprintf(stderr, "--batch-size %lld is not a multiple of the %lld ranks\n",
                 static_cast<long long>(o.batch_size), static_cast<long long>(world));
    return 2;
  }
  trainpack::DataParallelTrainer trainer(pg);
  const Timing timing = train(trainer, o, make_batches(o, rank, world));
  if (rank == 0) print_result("trainpack", world, o, timing);
  return 0;
}

// The process group's all_reduce_sum of `tensors`, each timed alone after a barrier; the median
// and the minimum in ms over `reps` (after 5 untimed).
std::pair<double, double> time_all_reduce(trainpack::ProcessGroup& pg,
                                          std::vector<at::Tensor> tensors, int64_t reps) {
  std::vector<double> ms;
  for (int64_t rep = 0; rep < reps + 5; ++rep) {
    pg.barrier();
    const auto start = Clock::now();
    pg.all_reduce_sum(tensors);
    const double t = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (rep >= 5) ms.push_back(t);
  }
  return {trainpack::bench::median(ms), *std::min_element(ms.begin(), ms.end())};
}

int run_allreduce(const Options& o) {
  auto pg = trainpack::ProcessGroup::from_environment(trainpack::DistributedOptions());
  int64_t grad_floats = 0;
  for (const auto& p : fashion_mnist::Net()->parameters()) grad_floats += p.numel();
  for (int64_t floats : {grad_floats, int64_t{1} << 20, int64_t{1} << 22}) {
    const auto [median, min] = time_all_reduce(*pg, {torch::ones({floats})}, o.reps);
    if (pg->rank() == 0) {
      std::printf("result side=allreduce floats=%lld bytes=%lld median_ms=%.4f min_ms=%.4f\n",
                  static_cast<long long>(floats), static_cast<long long>(4 * floats), median, min);
    }
  }
  // The trainer's stop vote: one int64 per rank, all-reduced at every step boundary.
  const auto [median, min] =
      time_all_reduce(*pg, {torch::zeros({pg->world_size()}, at::kLong)}, o.reps);
  if (pg->rank() == 0) {
    std::printf("result side=vote longs=%lld median_ms=%.4f min_ms=%.4f\n",
                static_cast<long long>(pg->world_size()), median, min);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  trainpack::configure_runtime(argc, argv,
                               trainpack::RuntimeOptions()
                                   .intra_op_threads(static_cast<int>(o.threads))
                                   .blas_threads(1)
                                   .tune_malloc(true)
                                   .log(false));
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  try {
    if (o.allreduce) return run_allreduce(o);
    if (o.single) return run_single(o);
    return run_data_parallel(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainpack_bench_distributed: %s\n", e.what());
    return 1;
  }
}
