// bfloat16 mixed precision against float32 on the main job: the same model
// (examples/fashion_mnist/model.h), data (Fashion-MNIST, shuffled with one seed), optimizer and
// learning-rate schedule, trained by SimpleTrainer in the same process, once in each precision
// (alternating, `--reps` times), with InferenceRunner measuring the validation error on the 10,000
// test images after every epoch.
//
//   trainpack_bench_precision [--epochs E (2)] [--reps R (1)] [--steps N (a full pass: 468)]
//                             [--data DIR]
//
// The step time of a run is the median of its steps' times (a steady_clock read in before_run and
// after_run of a callback: the forward, backward and optimizer step of one batch of 128), leaving
// out the first 20 steps (warm-up: oneDNN picks and caches its kernels). The last line is
// `bf16_over_fp32` = median step time of bfloat16 / that of float32 (each the median over the reps'
// medians). The threads, BLAS and malloc settings are the main job's (configure_runtime), printed
// first, with whether the CPU has native bfloat16 instructions.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../examples/fashion_mnist/model.h"
#include "support.h"
#include "trainpack/trainpack.h"

namespace {

using Clock = std::chrono::steady_clock;

// The time of every hooked step, in milliseconds.
class StepTimes : public trainpack::Callback {
 public:
  std::vector<double> ms;

 protected:
  trainpack::RunArgs _before_run(const trainpack::StepContext&) override {
    start_ = Clock::now();
    return {};
  }
  void _after_run(const trainpack::StepContext&, const trainpack::RunValues&) override {
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start_).count());
  }

 private:
  Clock::time_point start_;
};

struct Result {
  double median_ms = 0;
  double min_ms = 0;
  double val_error = 0;
};

Result train_once(trainpack::Precision precision, int64_t epochs, int64_t steps,
                  const std::string& data) {
  torch::manual_seed(42);
  auto model = std::make_shared<fashion_mnist::Model>(0.1, 5e-4);
  auto train = std::make_shared<trainpack::BatchData>(
      std::make_shared<trainpack::FashionMnist>(
          "train", data, trainpack::FashionMnistOptions().shuffle(true).seed(42)),
      128);
  auto test = std::make_shared<trainpack::BatchData>(
      std::make_shared<trainpack::FashionMnist>("test", data), 256, /*remainder=*/true);
  auto times = std::make_shared<StepTimes>();
  trainpack::ScheduledHyperParamSetter::Schedule schedule{{0, 0.1}};
  if (epochs > 1) schedule.emplace_back(epochs - 1, 0.01);  // the last epoch at a tenth
  trainpack::SimpleTrainer trainer;
  trainpack::TrainConfig config =
      trainpack::TrainConfig()
          .model(model)
          .dataflow(train)
          .max_epoch(epochs)
          .precision(precision)
          .callbacks(std::vector<trainpack::CallbackPtr>{
              times,
              std::make_shared<trainpack::ScheduledHyperParamSetter>("learning_rate", schedule),
              std::make_shared<trainpack::InferenceRunner>(
                  test, std::make_shared<trainpack::ClassificationError>("wrong-top1",
                                                                         "val-error-top1"))})
          .extra_callbacks({})
          .monitors({});
  if (steps > 0) config.steps_per_epoch(steps);
  trainpack::launch_train_with_config(config, trainer);

  Result r;
  std::vector<double> timed(times->ms.begin() + std::min<size_t>(20, times->ms.size() / 2),
                            times->ms.end());
  r.median_ms = trainpack::bench::median(timed);
  r.min_ms = *std::min_element(timed.begin(), timed.end());
  r.val_error = trainer.monitors().get_latest("val-error-top1");
  return r;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

bool cpu_flag(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0)
      return (line + " ").find(" " + flag + " ") != std::string::npos;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t epochs = 2, reps = 1, steps = 0;
  std::string data = trainpack::kFashionMnistDir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--epochs" && i + 1 < argc) {
      epochs = trainpack::bench::parse_positive("--epochs", argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = trainpack::bench::parse_positive("--reps", argv[++i]);
    } else if (a == "--steps" && i + 1 < argc) {
      steps = trainpack::bench::parse_positive("--steps", argv[++i]);
    } else if (a == "--data" && i + 1 < argc) {
      data = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--epochs E (2)] [--reps R (1)] [--steps N (a full pass)] "
                   "[--data DIR]\n",
                   argv[0]);
      return 2;
    }
  }
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const trainpack::RuntimeReport runtime = trainpack::configure_runtime(
      argc, argv,
      trainpack::RuntimeOptions().intra_op_threads(threads).log(false).log_level(
          trainpack::logger::Level::kInfo));
  runtime.log();  // the threads, BLAS, malloc and OpenMP lines
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);

  std::printf(
      "precision benchmark: fashion_mnist NetImpl, batches of 128, %lld epoch(s) of %s "
      "per precision, %lld rep(s)\n",
      static_cast<long long>(epochs),
      steps > 0 ? (std::to_string(steps) + " steps").c_str() : "a full pass (468 steps)",
      static_cast<long long>(reps));
  std::printf("CPU: %s; avx512_bf16: %s, amx_bf16: %s (trainpack::cpu_has_native_bf16: %s)\n",
              cpu_model().c_str(), cpu_flag("avx512_bf16") ? "yes" : "no",
              cpu_flag("amx_bf16") ? "yes" : "no", trainpack::cpu_has_native_bf16() ? "yes" : "no");
  std::printf("threads: %d intra-op (torch::get_num_threads)\n", torch::get_num_threads());
  std::fflush(stdout);

  std::vector<double> fp32_ms, bf16_ms;
  Result fp32, bf16;
  for (int64_t rep = 0; rep < reps; ++rep) {
    fp32 = train_once(trainpack::Precision::kFloat32, epochs, steps, data);
    fp32_ms.push_back(fp32.median_ms);
    std::printf("rep %lld float32:  median %7.2f ms/step, min %7.2f, val-error-top1 %.4f\n",
                static_cast<long long>(rep), fp32.median_ms, fp32.min_ms, fp32.val_error);
    std::fflush(stdout);
    bf16 = train_once(trainpack::Precision::kBFloat16, epochs, steps, data);
    bf16_ms.push_back(bf16.median_ms);
    std::printf("rep %lld bfloat16: median %7.2f ms/step, min %7.2f, val-error-top1 %.4f\n",
                static_cast<long long>(rep), bf16.median_ms, bf16.min_ms, bf16.val_error);
    std::fflush(stdout);
  }
  const double m32 = trainpack::bench::median(fp32_ms), m16 = trainpack::bench::median(bf16_ms);
  std::printf("float32  median ms/step %.2f, val-error-top1 %.4f (last rep)\n", m32,
              fp32.val_error);
  std::printf("bfloat16 median ms/step %.2f, val-error-top1 %.4f (last rep)\n", m16,
              bf16.val_error);
  std::printf("bf16_over_fp32=%.3f\n", m16 / m32);
  return 0;
}
