// trainpack_resume_child: the process that kill_resume_test.cpp kills with SIGKILL at random
// moments. It trains a small seeded model for a fixed number of steps with ModelSaver saving
// every step, auto-resuming from its log directory, and reports on stdout, one line each,
// written unbuffered (so that what it printed before a SIGKILL reaches the parent); the log
// lines go to stderr:
//   found <checkpoint prefix> | fresh        what AutoResumeTrainConfig picked
//   start <global_step> <epoch> <step_in_epoch>   where training continues (before_train)
//   saved <global_step>                      after the checkpoint of that step is complete
//   done <global_step>                       training finished
//   stopped <signal name> <global_step>      a stop signal ended training (stop_signals_test.cpp)
//
//   trainpack_resume_child <log dir> [--stop-test]
// With --stop-test (for stop_signals_test.cpp): ModelSaver saves at every epoch's end only (and at
// a stop by a signal), every step takes 50 ms and prints "step <global_step>".
// Exit status 0 when training finished, exit_code_for_signal when a stop signal ended it, 1 on an
// error (printed to stderr).
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/summary.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/logger.h"

#include "programs/programs.h"

namespace resume_child {

using namespace trainpack;  // NOLINT(google-build-using-namespace): a test program

// The run: 8 steps per epoch (64 points, batches of 8), 5 epochs.
constexpr int64_t kMaxEpoch = 5;

// The reports' file descriptor: the original stdout (main sends everything else, the logger's
// lines included, to stderr).
int g_report_fd = STDOUT_FILENO;

// One report line with write(2): nothing stays in a buffer when the process is killed.
void say(const std::string& text) {
  int err = 0;
  trainpack::write_all_or_errno(g_report_fd, text + "\n", &err);
}

DataFlowPtr make_flow() {
  std::vector<Datapoint> points;
  for (int i = 0; i < 64; ++i) {
    const float a = std::sin(0.37f * static_cast<float>(i));
    const float b = std::cos(0.91f * static_cast<float>(i));
    const float c = static_cast<float>(i % 9) / 4.0f - 1.0f;
    points.push_back({torch::tensor({a, b, c}), torch::tensor({a * b - c})});
  }
  return std::make_shared<BatchData>(
      std::make_shared<DataFromList>(points, DataFromListOptions().shuffle(true).seed(5)), 8);
}

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(3, 32))),
        fc2(register_module("fc2", torch::nn::Linear(32, 1))) {}
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

class Model : public ModelDesc {
 public:
  Model() {
    torch::manual_seed(23);
    net_ = Net();
  }
  InputSignature inputs() const override {
    return {InputDesc("x", {-1, 3}), InputDesc("y", {-1, 1})};
  }
  std::shared_ptr<torch::nn::Module> module() override { return net_.ptr(); }
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    at::Tensor h = torch::dropout(torch::tanh(net_->fc1(in[0])), 0.2, ctx.is_training());
    at::Tensor cost = torch::mse_loss(net_->fc2(h), in[1]);
    ctx.add_moving_summary("cost", cost);
    return cost;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::SGD>(net_->parameters(),
                                               torch::optim::SGDOptions(0.05).momentum(0.9));
  }

 private:
  Net net_{nullptr};
};

// Reports the start point and every completed save; puts the step's cost to the monitors.
class Reporter : public Callback {
 public:
  Reporter(std::string dir, bool stop_test) : dir_(std::move(dir)), stop_test_(stop_test) {}

 protected:
  void _before_train() override {
    const ResumePoint p = trainer().resume_point();
    say("start " + std::to_string(p.global_step) + " " + std::to_string(p.epoch) + " " +
        std::to_string(p.step_in_epoch));
  }
  RunArgs _before_run(const StepContext&) override { return RunArgs{"cost"}; }
  void _after_run(const StepContext&, const RunValues& values) override {
    cost_ = values["cost"].item<double>();
  }
  void _trigger_step() override {
    trainer().monitors().put_scalar("step_cost", cost_);
    const int64_t gs = global_step();
    if (stop_test_) {
      say("step " + std::to_string(gs));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return;
    }
    // The save of this step may still be in flight on ModelSaver's writer thread: "saved" means
    // durable, so wait for it (the kills land during the writes all the same).
    wait_for_model_savers(trainer());
    if (checkpoint_exists(dir_ + "/model-" + std::to_string(gs))) {
      say("saved " + std::to_string(gs));
    }
  }

 private:
  std::string dir_;
  bool stop_test_;
  double cost_ = 0;
};

int run(const std::string& dir, bool stop_test) {
  at::set_num_threads(1);
  logger::set_logger_dir(dir, 'k');
  auto saver = std::make_shared<ModelSaver>(ModelSaverOptions().max_to_keep(2));
  CallbackPtr saving = saver;  // every epoch's end
  if (!stop_test) {
    saving = std::make_shared<PeriodicTrigger>(saver, PeriodicTriggerOptions().every_k_steps(1));
  }
  AutoResumeTrainConfig config(
      TrainConfig()
          .model(std::make_shared<Model>())
          .dataflow(make_flow())
          .callbacks({saving, std::make_shared<Reporter>(dir, stop_test)})
          .extra_callbacks(std::vector<CallbackPtr>{std::make_shared<MovingAverageSummary>(),
                                                    MergeAllSummaries()})
          .monitors(std::vector<MonitorPtr>{JSONWriter::create()})
          .max_epoch(kMaxEpoch));
  say(config.found_checkpoint().empty() ? "fresh" : "found " + config.found_checkpoint());
  SimpleTrainer trainer;
  launch_train_with_config(config, trainer);
  if (trainer.received_signal() != 0 && !trainer.finished()) {
    say("stopped " + stop_signal_name(trainer.received_signal()) + " " +
        std::to_string(trainer.global_step()));
    return exit_code_for_signal(trainer.received_signal());
  }
  say("done " + std::to_string(trainer.global_step()));
  return 0;
}

}  // namespace resume_child

// The program's main, run by trainpack_test_programs (tests/programs/main.cpp) when it is started
// as trainpack_resume_child.
int resume_child_main(int argc, char** argv) {
  using namespace resume_child;  // NOLINT(google-build-using-namespace): its own helpers
  const bool stop_test = argc == 3 && std::strcmp(argv[2], "--stop-test") == 0;
  if (argc != 2 && !stop_test) {
    std::fprintf(stderr, "usage: %s <log dir> [--stop-test]\n", argv[0]);
    return 2;
  }
  // The logger writes to stdout: keep stdout for the reports alone.
  g_report_fd = ::dup(STDOUT_FILENO);
  if (g_report_fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    std::perror("trainpack_resume_child: dup");
    return 1;
  }
  try {
    return run(argv[1], stop_test);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainpack_resume_child: %s\n", e.what());
    return 1;
  }
}
