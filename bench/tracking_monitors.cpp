// trainpack_bench_tracking_monitors: what CometMLMonitor and MLflowMonitor cost the training
// thread per step, against JSONWriter (the target: the same), and how many requests each sends
// per epoch.
//
// A trivial step (one counter increment through a volatile) that puts one scalar per step runs in
// a Trainer with, as its only monitor:
//   (a) none (the put still records the history);
//   (b) JSONWriter, writing stats.json into a fresh logger directory;
//   (c) CometMLMonitor, sending to a local HTTP server (bench/http_sink.h: 127.0.0.1, answers 200
//       at once);
//   (d) MLflowMonitor, sending to the same kind of server.
// The time measured is the training thread's, from the first callback's before_train to the
// moment its after_train starts: every step and every epoch end, without the monitors' final
// flush in after_train (which waits for the network by design; printed apart as the flush time).
// Each form runs `--reps` times after a warm-up, interleaved; the median ns/step (and minimum) is
// reported, with what each adds over (a), and the requests each monitor sent per epoch (the
// create/open requests and the final status counted apart).
// The last lines are `comet_over_json=<ratio>` and `mlflow_over_json=<ratio>` of the added costs
// over (a) (1.0: the same as JSONWriter's).
//
//   trainpack_bench_tracking_monitors [--steps-per-epoch N (1000)] [--epochs E (20)] [--reps R (5)]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "http_sink.h"
#include "support.h"
#include "trainpack/callbacks/comet_ml_monitor.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/mlflow_monitor.h"
#include "trainpack/core/callback.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/logger.h"

namespace {

using Clock = std::chrono::steady_clock;
using trainpack::bench::median;
using trainpack::bench::parse_positive;

volatile uint64_t g_counter = 0;

class PuttingTrainer : public trainpack::Trainer {
 public:
  void run_step() override {
    hooked_run([](trainpack::StepContext&) { g_counter = g_counter + 1; });
    monitors().put_scalar("cost", static_cast<double>(g_counter % 1000) * 1e-3);
  }
};

// The first callback of the list: notes when training starts and when after_train starts (every
// callback's after_train runs before the monitors', which are registered after the callbacks).
class Stopwatch : public trainpack::Callback {
 public:
  Clock::time_point start, end;

 protected:
  void _before_train() override { start = Clock::now(); }
  void _after_train() override { end = Clock::now(); }
};

struct Result {
  double ns_per_step;      // training thread, before_train to after_train
  double flush_ms;         // after_train of the monitors, until train() returned
  int64_t requests = 0;    // requests the server received in the run
};

enum class Form { kNone, kJson, kComet, kMlflow };

Result run(Form form, int64_t steps_per_epoch, int64_t epochs) {
  trainpack::bench::ScratchLoggerDir dir("trainpack_bench_tracking");
  trainpack::bench::HttpSink sink;
  std::vector<trainpack::MonitorPtr> monitors;
  const auto tracking = trainpack::TrackingOptions().flush_timeout(std::chrono::seconds(30));
  switch (form) {
    case Form::kNone:
      break;
    case Form::kJson:
      monitors.push_back(std::make_shared<trainpack::JSONWriter>());
      break;
    case Form::kComet:
      monitors.push_back(std::make_shared<trainpack::CometMLMonitor>(
          trainpack::CometMLMonitorOptions()
              .api_key("bench-key")
              .workspace("bench")
              .project_name("bench")
              .url(sink.url() + "/api/rest/v2")
              .tracking(tracking)));
      break;
    case Form::kMlflow:
      monitors.push_back(std::make_shared<trainpack::MLflowMonitor>(
          trainpack::MLflowMonitorOptions().tracking_uri(sink.url()).tracking(tracking)));
      break;
  }
  auto stopwatch = std::make_shared<Stopwatch>();
  PuttingTrainer trainer;
  trainer.train({stopwatch}, monitors, steps_per_epoch, 1, epochs);
  const auto returned = Clock::now();
  if (trainer.received_signal() != 0) {
    std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
  }
  const std::chrono::duration<double, std::nano> took = stopwatch->end - stopwatch->start;
  const std::chrono::duration<double, std::milli> flush = returned - stopwatch->end;
  return {took.count() / static_cast<double>(trainer.global_step()), flush.count(),
          sink.requests()};
}

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

int main(int argc, char** argv) {
  int64_t steps_per_epoch = 1000, epochs = 20, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--steps-per-epoch" || arg == "--epochs" || arg == "--reps") && i + 1 < argc) {
      const int64_t v = parse_positive(arg.c_str(), argv[++i]);
      (arg == "--steps-per-epoch" ? steps_per_epoch : arg == "--epochs" ? epochs : reps) = v;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--steps-per-epoch N (1000)] [--epochs E (20)] [--reps R (5)]\n",
                   argv[0]);
      return 2;
    }
  }
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  std::printf("tracking monitors benchmark: %lld epochs x %lld steps, one scalar per step, %lld reps\n",
              static_cast<long long>(epochs), static_cast<long long>(steps_per_epoch),
              static_cast<long long>(reps));

  const Form forms[] = {Form::kNone, Form::kJson, Form::kComet, Form::kMlflow};
  const char* names[] = {"(a) no monitor", "(b) JSONWriter", "(c) CometMLMonitor",
                         "(d) MLflowMonitor"};
  for (Form f : forms) run(f, steps_per_epoch, std::max<int64_t>(epochs / 10, 1));  // warm-up

  std::vector<double> ns[4], flush[4];
  int64_t requests[4] = {0, 0, 0, 0};
  for (int64_t r = 0; r < reps; ++r) {
    for (int k = 0; k < 4; ++k) {
      const Result res = run(forms[k], steps_per_epoch, epochs);
      ns[k].push_back(res.ns_per_step);
      flush[k].push_back(res.flush_ms);
      requests[k] = res.requests;
    }
  }
  std::printf("form                  median ns/step  min ns/step  added ns/step  flush ms  "
              "requests/run  requests/epoch\n");
  const double none = median(ns[0]);
  double added[4];
  for (int k = 0; k < 4; ++k) {
    added[k] = median(ns[k]) - none;
    std::printf("%-21s %14.1f %12.1f %14.1f %9.1f %13lld %15.2f\n", names[k], median(ns[k]),
                minimum(ns[k]), added[k], median(flush[k]), static_cast<long long>(requests[k]),
                static_cast<double>(requests[k]) / static_cast<double>(epochs));
  }
  std::printf("comet_over_json=%.2f\n", added[2] / added[1]);
  std::printf("mlflow_over_json=%.2f\n", added[3] / added[1]);
  return 0;
}
