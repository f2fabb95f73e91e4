// trainpack_bench_stats_json: what JSONWriter's writes of stats.json cost once the file is large.
// Every write replaces the whole file (a temporary file renamed over it, so that a reader always
// opens a complete file), so its cost grows with the file; the writer's thread rests 9 times a
// write's duration after it. Two phases, for files of 10,000, 100,000 and 1,000,000 entries
// (about 67 bytes each):
//   write    one write_file_atomically of the file, not synced and synced (what the writer does
//            between epoch ends and after one): median over --reps reps, in milliseconds;
//   train    a NoOpTrainer appending to a stats.json of that many entries: 10 epochs of 1,000
//            steps, a scalar put every step, each epoch then waiting until it has lasted
//            --epoch-ms (default 500) as a real epoch would. Per epoch: the writes (JSONWriter's
//            io_hook counts them), the CPU time of the threads other than the training thread
//            (the writer's), and the training thread's own time for the 1,000 steps.
//
//   trainpack_bench_stats_json [--reps R (5)] [--dir DIR (.)] [--epoch-ms MS (500)]
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support.h"
#include "trainpack/callbacks/monitor.h"
#include "trainpack/testing.h"
#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/logger.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using trainpack::bench::median;

constexpr int64_t kStepsPerEpoch = 1000;
constexpr int64_t kEpochs = 10;

// A stats.json of `entries` one-scalar entries, in the layout JSONWriter writes.
std::string stats_text(int64_t entries) {
  std::string s = "[";
  for (int64_t i = 0; i < entries; ++i) {
    if (i > 0) s += ", ";
    s += "{\"cost\": 0.334684282541275, \"epoch_num\": " + std::to_string(i / kStepsPerEpoch + 1) +
         ", \"global_step\": " + std::to_string(i + 1) + "}";
  }
  return s + "]";
}

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void bench_write(const fs::path& dir, const std::string& text, int reps) {
  const std::string path = (dir / "stats.json").string();
  double ms[2];
  for (int durable = 0; durable < 2; ++durable) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      const auto a = Clock::now();
      trainpack::write_file_atomically(path, text, durable != 0);
      t.push_back(ms_since(a));
    }
    ms[durable] = median(t);
  }
  std::printf("  write: %8.2f ms not synced, %8.2f ms synced\n", ms[0], ms[1]);
  fs::remove(path);
}

void bench_train(const fs::path& dir, const std::string& text, int64_t entries, int epoch_ms) {
  trainpack::logger::set_logger_dir(dir.string(), 'k');
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  std::ofstream(dir / "stats.json", std::ios::binary) << text;
  int writes = 0;
  auto writer = std::make_shared<trainpack::JSONWriter>(trainpack::JSONWriterOptions().io_hook(
      [&writes](const char* what) { writes += std::string(what) == "write" ? 1 : 0; }));
  auto cb = std::make_shared<trainpack::testing::ActionCallback>();
  cb->trigger_step_fn = [](trainpack::testing::ActionCallback& c) {
    c.trainer().monitors().put_scalar("cost", 0.25);
  };
  Clock::time_point epoch_start;
  double steps_cpu = 0, epoch_cpu_start = 0;
  cb->before_epoch_fn = [&](trainpack::testing::ActionCallback&) {
    epoch_start = Clock::now();
    epoch_cpu_start = thread_cpu_seconds();
  };
  cb->trigger_epoch_fn = [&](trainpack::testing::ActionCallback&) {
    steps_cpu += thread_cpu_seconds() - epoch_cpu_start;
    const double left = epoch_ms - ms_since(epoch_start);
    if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(left));
  };
  const double cpu0 = process_cpu_seconds();
  const double own0 = thread_cpu_seconds();
  const int64_t first_epoch = entries / kStepsPerEpoch + 1;
  {
    trainpack::NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    trainer.train({cb}, {writer}, kStepsPerEpoch, first_epoch, first_epoch + kEpochs - 1);
  }
  // The training thread's own CPU time includes reading the file found at start.
  const double others = (process_cpu_seconds() - cpu0) - (thread_cpu_seconds() - own0);
  std::printf(
      "  train: %5.2f writes per epoch, writer's thread %8.2f ms CPU per epoch, "
      "training thread %6.2f ms per epoch of %lld steps\n",
      static_cast<double>(writes) / kEpochs, 1000 * others / kEpochs, 1000 * steps_cpu / kEpochs,
      static_cast<long long>(kStepsPerEpoch));
  trainpack::logger::unset_logger_dir();
  trainpack::logger::set_level(trainpack::logger::Level::kInfo);
}

}  // namespace

int main(int argc, char** argv) {
  int epoch_ms = 500;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--epoch-ms" && i + 1 < argc) {
      epoch_ms = static_cast<int>(trainpack::bench::parse_positive("--epoch-ms", argv[++i]));
    } else {
      rest.push_back(argv[i]);
    }
  }
  const auto opts =
      trainpack::bench::parse_reps_and_dir(static_cast<int>(rest.size()), rest.data(), 5);
  for (const int64_t entries : {int64_t{10000}, int64_t{100000}, int64_t{1000000}}) {
    const std::string text = stats_text(entries);
    std::printf("%lld entries, %.1f MB:\n", static_cast<long long>(entries),
                static_cast<double>(text.size()) / 1e6);
    const fs::path dir = trainpack::bench::make_scratch_dir(opts.dir, "stats_json");
    bench_write(dir, text, opts.reps);
    bench_train(dir, text, entries, epoch_ms);
    fs::remove_all(dir);
  }
  return 0;
}
