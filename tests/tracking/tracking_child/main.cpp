// trainpack_tracking_child: a small run sent to an MLflow tracking server (MLFLOW_TRACKING_URI,
// MLFLOW_EXPERIMENT_NAME) by MLflowMonitor, for the tests against MLflow's own server
// (tests/tracking/mlflow_server_test.py): y = 2 x0 - x1 learnt by one Linear layer, 3 steps an
// epoch, the scalars also in <logdir>/stats.json (JSONWriter). At every epoch end it puts
// progress = epoch + 0.25, and what the flags ask for.
//
//   trainpack_tracking_child --logdir DIR --epochs N [--odd-values] [--many-metrics K]
//       [--long-param BYTES] [--pause-after-epoch E]... [--flush-timeout-ms MS]
//       [--max-attempts N] [--backoff-ms MS]
//
// --odd-values         at each epoch end also puts values and names MLflow treats specially:
//                      odd/nan, odd/inf, odd/neg_inf, odd/max, odd/denormal, and 1.5 under the
//                      names "val:loss", "a//b", "../up", "café" and 300 'k's.
// --many-metrics K     K scalars more at each epoch end (many/0000 = 0, many/0001 = 1, ...).
// --long-param BYTES   a param long_param of BYTES bytes ("0123456789" repeated), and a short one
//                      short_param = "kept".
// --pause-after-epoch E  after epoch E's callbacks (in the next before_epoch), creates
//                      DIR/paused-E and waits until DIR/resume-E exists (at most 300 s).
// --flush-timeout-ms, --max-attempts, --backoff-ms: TrackingOptions' flush_timeout, max_attempts
//                      and initial_backoff (max_backoff 4 x the latter).
// At the end it prints `counters: queued Q dropped D requests R failed F` on stdout. Exit status
// 0 when training finished, 1 on an error (printed), 2 on bad arguments.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/mlflow_monitor.h"
#include "trainpack/core/callback.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/logger.h"

#include "programs/programs.h"
#include "support/linear_regression.h"

namespace tracking_child {

using namespace trainpack;  // NOLINT(google-build-using-namespace): a test program

struct Flags {
  std::string logdir;
  int64_t epochs = 0;
  bool odd_values = false;
  int64_t many_metrics = 0;
  int64_t long_param = -1;
  std::vector<int64_t> pause_after;
  int64_t flush_timeout_ms = 30000;
  int max_attempts = 5;
  int64_t backoff_ms = 1000;
};

// Puts the statistics the flags ask for at every epoch end.
class OddValues : public Callback {
 public:
  explicit OddValues(const Flags& flags) : flags_(flags) {}

 protected:
  void _trigger_epoch() override {
    Monitors& m = trainer().monitors();
    m.put_scalar("progress", static_cast<double>(epoch_num()) + 0.25);
    if (flags_.odd_values) {
      m.put_scalar("odd/nan", std::numeric_limits<double>::quiet_NaN());
      m.put_scalar("odd/inf", std::numeric_limits<double>::infinity());
      m.put_scalar("odd/neg_inf", -std::numeric_limits<double>::infinity());
      m.put_scalar("odd/max", std::numeric_limits<double>::max());
      m.put_scalar("odd/denormal", std::numeric_limits<double>::denorm_min());
      for (const std::string& name :
           {std::string("val:loss"), std::string("a//b"), std::string("../up"),
            std::string("caf\xc3\xa9"), std::string(300, 'k')}) {
        m.put_scalar(name, 1.5);
      }
    }
    for (int64_t i = 0; i < flags_.many_metrics; ++i) {
      char name[32];
      std::snprintf(name, sizeof(name), "many/%04lld", static_cast<long long>(i));
      m.put_scalar(name, static_cast<double>(i));
    }
  }

 private:
  const Flags& flags_;
};

// Holds training between two epochs until the test says go on.
class Pause : public Callback {
 public:
  explicit Pause(const Flags& flags) : flags_(flags) {}

 protected:
  void _before_epoch() override {
    const int64_t finished = epoch_num() - 1;
    for (int64_t e : flags_.pause_after) {
      if (e != finished) continue;
      const std::filesystem::path dir(flags_.logdir);
      std::ofstream(dir / ("paused-" + std::to_string(e))) << "paused\n";
      const auto resume = dir / ("resume-" + std::to_string(e));
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
      while (!std::filesystem::exists(resume)) {
        if (std::chrono::steady_clock::now() > deadline) {
          throw std::runtime_error("tracking_child: " + resume.string() + " never appeared");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }

 private:
  const Flags& flags_;
};

int usage(const std::string& why) {
  std::fprintf(stderr,
               "trainpack_tracking_child: %s\nusage: trainpack_tracking_child --logdir DIR "
               "--epochs N [--odd-values] [--many-metrics K] [--long-param BYTES] "
               "[--pause-after-epoch E]... [--flush-timeout-ms MS] [--max-attempts N] "
               "[--backoff-ms MS]\n",
               why.c_str());
  return 2;
}

int run(const Flags& flags) {
  at::set_num_threads(1);
  logger::set_logger_dir(flags.logdir, 'k');
  MLflowParams params;
  if (flags.long_param >= 0) {
    std::string value;
    while (static_cast<int64_t>(value.size()) < flags.long_param) value += "0123456789";
    value.resize(static_cast<size_t>(flags.long_param));
    params = {{"long_param", value}, {"short_param", "kept"}};
  }
  const auto backoff = std::chrono::milliseconds(flags.backoff_ms);
  auto mlflow = std::make_shared<MLflowMonitor>(MLflowMonitorOptions().params(params).tracking(
      TrackingOptions()
          .flush_timeout(std::chrono::milliseconds(flags.flush_timeout_ms))
          .max_attempts(flags.max_attempts)
          .initial_backoff(backoff)
          .max_backoff(backoff * 4)));
  TrainConfig config;
  config.model(std::make_shared<testing::LinearRegressionModel>())
      .dataflow(testing::linear_regression_batches())
      .callbacks({std::make_shared<OddValues>(flags), std::make_shared<Pause>(flags)})
      .monitors(std::vector<MonitorPtr>{JSONWriter::create(), mlflow})
      .max_epoch(flags.epochs);
  SimpleTrainer trainer;
  launch_train_with_config(config, trainer);
  std::printf("counters: queued %lld dropped %lld requests %lld failed %lld\n",
              static_cast<long long>(mlflow->records_queued()),
              static_cast<long long>(mlflow->records_dropped()),
              static_cast<long long>(mlflow->requests_sent()),
              static_cast<long long>(mlflow->requests_failed()));
  std::fflush(stdout);
  return 0;
}

}  // namespace tracking_child

// The program's main, run by trainpack_test_programs (tests/programs/main.cpp).
int tracking_child_main(int argc, char** argv) {
  using tracking_child::usage;
  tracking_child::Flags flags;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--logdir") {
        flags.logdir = value();
      } else if (arg == "--epochs") {
        flags.epochs = std::stoll(value());
      } else if (arg == "--odd-values") {
        flags.odd_values = true;
      } else if (arg == "--many-metrics") {
        flags.many_metrics = std::stoll(value());
      } else if (arg == "--long-param") {
        flags.long_param = std::stoll(value());
      } else if (arg == "--pause-after-epoch") {
        flags.pause_after.push_back(std::stoll(value()));
      } else if (arg == "--flush-timeout-ms") {
        flags.flush_timeout_ms = std::stoll(value());
      } else if (arg == "--max-attempts") {
        flags.max_attempts = std::stoi(value());
      } else if (arg == "--backoff-ms") {
        flags.backoff_ms = std::stoll(value());
      } else {
        return usage("unknown argument " + arg);
      }
    }
  } catch (const std::exception& e) {
    return usage(e.what());
  }
  if (flags.logdir.empty() || flags.epochs <= 0) return usage("--logdir and --epochs are needed");
  try {
    return tracking_child::run(flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainpack_tracking_child: %s\n", e.what());
    return 1;
  }
}
