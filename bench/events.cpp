// trainpack_bench_events: how fast TFEventWriter gets scalars to disk, and what one put_scalar
// costs the training thread.
//
// (1) Throughput: a Trainer whose step is one `monitors().put_scalar("loss", v)` (so every
//     scalar has its own global_step), with a TFEventWriter (default options: max_queue 10,
//     flush_secs 120) as the only monitor, trains --scalars steps in one epoch. The time runs
//     from the start of train() to its return, i.e. until after_train has flushed, fsynced and
//     closed the file: events_per_s = scalars / that time. The file is then checked (size, and
//     the number of records) so that nothing was dropped.
// (2) Training-thread cost: the same trainer, in epochs of --burst steps (below the writer's
//     65536-event pending limit, so the producer never waits for the disk; the epoch-end flush
//     runs between bursts), times each put_scalar call with steady_clock; the mean of a pair of
//     clock reads with nothing between them is subtracted (the median and 99th percentile of the
//     calls are printed beside the mean: on a loaded machine, preemptions inside a timed call
//     weigh on the mean). This is the time the call takes on the training thread
//     (Monitors::put_scalar: process_scalar on every monitor, the history, the scalar summary,
//     and TFEventWriter::process_summary, which copies it into the queue), while the writer's
//     thread encodes and writes on another core.
// (3) The writer alone: an EventFileWriter (trainpack/utils/event_file_writer.h, what
//     TFEventWriter writes through; default options) is given --scalars add_scalar calls from
//     this thread, then closed; writer_events_per_s = scalars / the time from the first call to
//     the return of close() (the file flushed, fsynced and closed), the file checked as in (1).
//     The difference to (1) is what the trainer and the monitors add per scalar.
// Each phase runs --reps times; the median is reported. The last two lines are
// `writer_events_per_s=<Z>` and `events_per_s=<X> put_scalar_ns=<Y>`.
//
//   trainpack_bench_events [--scalars N] [--burst B] [--bursts K] [--reps R] [--dir DIR]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support.h"
#include "trainpack/callbacks/tf_event_writer.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/event_file_writer.h"
#include "trainpack/utils/logger.h"

namespace {

using trainpack::bench::median;
using trainpack::bench::parse_positive;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// One put_scalar per step; when `timed`, each call is timed.
class ScalarTrainer : public trainpack::Trainer {
 public:
  explicit ScalarTrainer(bool timed) : timed_(timed) {}
  void run_step() override {
    hooked_run([this](trainpack::StepContext&) {
      const double v = static_cast<double>(global_step()) * 1e-3;
      if (!timed_) {
        monitors().put_scalar("loss", v);
        return;
      }
      const auto t0 = Clock::now();
      monitors().put_scalar("loss", v);
      const auto t1 = Clock::now();
      if (calls_.size() < calls_.capacity()) {
        calls_.push_back(
            static_cast<float>(std::chrono::duration<double, std::nano>(t1 - t0).count()));
      }
    });
  }
  void reserve(size_t n) { calls_.reserve(n); }
  // Per-call times in ns (clock overhead included).
  std::vector<float>& calls() { return calls_; }

 private:
  bool timed_;
  std::vector<float> calls_;
};

struct CallStats {
  double mean, median, p99;
};

// Statistics of the per-call times, less the clock overhead.
CallStats call_stats(std::vector<float>& v, double clock_ns) {
  if (v.empty()) return {0, 0, 0};
  double total = 0;
  for (float x : v) total += x;
  std::sort(v.begin(), v.end());
  return {total / static_cast<double>(v.size()) - clock_ns, v[v.size() / 2] - clock_ns,
          v[v.size() * 99 / 100] - clock_ns};
}

double clock_pair_ns() {
  constexpr int kN = 1000000;
  double total = 0;
  for (int i = 0; i < kN; ++i) {
    const auto t0 = Clock::now();
    const auto t1 = Clock::now();
    total += std::chrono::duration<double, std::nano>(t1 - t0).count();
  }
  return total / kN;
}

void check_exit(const trainpack::Trainer& t) {
  if (t.received_signal() != 0) std::exit(trainpack::exit_code_for_signal(t.received_signal()));
}

// Records in an event file (framing only; the test suite checks the CRCs and the contents).
int64_t count_records(const std::string& path, uintmax_t* bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return -1;
  int64_t n = 0;
  unsigned char header[12];
  while (std::fread(header, 1, 12, f) == 12) {
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | header[i];
    if (std::fseek(f, static_cast<long>(len + 4), SEEK_CUR) != 0) break;
    ++n;
  }
  std::fclose(f);
  *bytes = fs::file_size(path);
  return n;
}

// True when `files` is one event file holding the version record and `scalars` events; else says
// what was found on stderr. `bytes` gets the file's size.
bool one_file_with(const std::vector<std::string>& files, int64_t scalars, uintmax_t* bytes) {
  const int64_t records = files.size() == 1 ? count_records(files[0], bytes) : -1;
  if (records == scalars + 1) return true;
  std::fprintf(stderr, "error: expected %lld records in one file, found %lld\n",
               static_cast<long long>(scalars + 1), static_cast<long long>(records));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t scalars = 1000000, burst = 10000, bursts = 50, reps = 5;
  std::string dir_arg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--scalars" || a == "--burst" || a == "--bursts" || a == "--reps") && i + 1 < argc) {
      const int64_t v = parse_positive(a.c_str(), argv[++i]);
      (a == "--scalars" ? scalars : a == "--burst" ? burst : a == "--bursts" ? bursts : reps) = v;
    } else if (a == "--dir" && i + 1 < argc) {
      dir_arg = argv[++i];
    } else {
      std::fprintf(a == "-h" || a == "--help" ? stdout : stderr,
                   "usage: %s [--scalars N (1000000)] [--burst B (10000)] [--bursts K (50)] "
                   "[--reps R (5)] [--dir DIR (a new directory under /tmp)]\n",
                   argv[0]);
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  std::string base = dir_arg;
  if (base.empty()) {
    base = trainpack::bench::make_scratch_dir(fs::temp_directory_path().string(),
                                              "trainpack_bench_events")
               .string();
  }

  std::printf(
      "events benchmark: %lld scalars per throughput run; %lld bursts of %lld timed "
      "put_scalar calls; %lld reps; files in %s\n",
      static_cast<long long>(scalars), static_cast<long long>(bursts),
      static_cast<long long>(burst), static_cast<long long>(reps), base.c_str());
  const double pair_ns = clock_pair_ns();
  std::vector<double> rates, put_ns, writer_rates;
  for (int64_t r = 0; r < reps; ++r) {
    // (1) throughput to disk
    {
      const fs::path dir = fs::path(base) / ("throughput" + std::to_string(r));
      fs::create_directories(dir);
      auto writer = std::make_shared<trainpack::TFEventWriter>(
          trainpack::TFEventWriterOptions().logdir(dir.string()));
      ScalarTrainer trainer(false);
      const auto start = Clock::now();
      trainer.train({}, {writer}, scalars, 1, 1);
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      check_exit(trainer);
      const auto files = writer->files();
      uintmax_t bytes = 0;
      if (!one_file_with(files, scalars, &bytes)) return 1;
      rates.push_back(static_cast<double>(scalars) / secs);
      std::printf("rep %lld: %lld scalars to disk in %.3f s (%.0f scalars/s, %.1f MB file)\n",
                  static_cast<long long>(r), static_cast<long long>(scalars), secs, rates.back(),
                  static_cast<double>(bytes) / 1e6);
      fs::remove_all(dir);
    }
    // (2) training-thread cost of put_scalar
    {
      const fs::path dir = fs::path(base) / ("latency" + std::to_string(r));
      fs::create_directories(dir);
      auto writer = std::make_shared<trainpack::TFEventWriter>(
          trainpack::TFEventWriterOptions().logdir(dir.string()));
      ScalarTrainer trainer(true);
      trainer.reserve(static_cast<size_t>(burst * bursts));
      trainer.train({}, {writer}, burst, 1, bursts);
      check_exit(trainer);
      const CallStats st = call_stats(trainer.calls(), pair_ns);
      put_ns.push_back(st.mean);
      std::printf(
          "rep %lld: put_scalar on the training thread: mean %.1f ns, median %.1f ns, "
          "p99 %.1f ns (%lld calls)\n",
          static_cast<long long>(r), st.mean, st.median, st.p99,
          static_cast<long long>(burst * bursts));
      fs::remove_all(dir);
    }
    // (3) the EventFileWriter alone
    {
      const fs::path dir = fs::path(base) / ("writer" + std::to_string(r));
      fs::create_directories(dir);
      trainpack::EventFileWriter writer(dir.string());
      const auto start = Clock::now();
      for (int64_t i = 0; i < scalars; ++i) {
        writer.add_scalar(1.7e9 + static_cast<double>(i) * 1e-3, i + 1, "loss",
                          static_cast<double>(i) * 1e-3);
      }
      writer.close();
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      const auto files = writer.files();
      uintmax_t bytes = 0;
      if (!one_file_with(files, scalars, &bytes)) return 1;
      writer_rates.push_back(static_cast<double>(scalars) / secs);
      std::printf(
          "rep %lld: EventFileWriter alone: %lld scalars to disk in %.3f s (%.0f scalars/s)\n",
          static_cast<long long>(r), static_cast<long long>(scalars), secs, writer_rates.back());
      fs::remove_all(dir);
    }
  }
  if (dir_arg.empty()) fs::remove_all(base);
  std::printf("clock pair overhead subtracted: %.1f ns\n", pair_ns);
  std::printf("median of %lld reps: %.0f scalars/s written; put_scalar mean %.1f ns\n",
              static_cast<long long>(reps), median(rates), median(put_ns));
  std::printf("writer_events_per_s=%.0f\n", median(writer_rates));
  std::printf("events_per_s=%.0f put_scalar_ns=%.1f\n", median(rates), median(put_ns));
  return 0;
}
