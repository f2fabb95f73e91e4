// trainpack_dp_worker: one rank of the data-parallel tests (tests/distributed/). It trains a small
// seeded model with DataParallelTrainer on the group its environment describes (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT; none: one process) and writes its final parameters.
//
//   trainpack_dp_worker <out file> [global batch] [epochs] [steps per epoch] [options]
//
// The data: 96 points, shuffled per pass from a fixed seed; ShardData gives rank r the points at
// positions r, r + W, r + 2W, ... of each pass, so that the ranks' batches k together are the
// single process's batch k at the same global batch. <out file> receives the parameters
// (float32, in the module's order) as raw bytes.
//
// Options (for the stop and failure tests; G is a global_step, seen in trigger_step):
//   --logdir D         logger directory D ('k'), a ModelSaver every step, the default monitors,
//                      and auto-resume from D (AutoResumeTrainConfig)
//   --bn               a BatchNorm1d after the first layer; <out file>.buffers receives the
//                      buffers as every forward sees them on entry (float32/int64 bytes)
//   --timeout-ms N     the collective timeout (default 20000)
//   --only-rank R      the next --wait-signal-at/--stop-at/--throw-at apply to rank R only
//                      (default: every rank)
//   --wait-signal-at G at step G, wait (at most 30 s) until a stop signal arrives
//   --stop-at G        at step G, a callback throws StopTraining
//   --throw-at G       at step G, a callback throws std::runtime_error("injected failure ...")
//   --data-seed S      the seed of the data's shuffle (default 3)
//   --accumulate N     accumulate the gradients of N batches (each of the global batch) per
//                      step; <out file>.micro_grads receives fc1's gradient as the tower sees it
//                      at the start of every micro-batch but the first of a step (float32 bytes)
//
// Reports, one line each on stdout, written unbuffered (the log goes to stderr):
//   start <global_step> <epoch> <step_in_epoch>     before_train
//   step <global_step>                              every trigger_step (before any waiting)
//   end <global_step> <signal>                      training ended (signal 0: none)
// Exit status: 0 when training ended, 128 + signal when a signal stopped it (143 for SIGTERM),
// 1 on an error (printed to stderr as "trainpack_dp_worker: <what>", or for a DistributedError
// "trainpack_dp_worker: DistributedError (failed rank <r>): <what>").
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "trainpack/detail/signals.h"
#include "trainpack/input/shard.h"
#include "trainpack/trainpack.h"
#include "trainpack/utils/file_io.h"

#include "programs/programs.h"

namespace dp_worker {

using namespace trainpack;  // NOLINT(google-build-using-namespace): a test program

int g_report_fd = STDOUT_FILENO;

// One report line with write(2): nothing stays in a buffer when the process is killed.
void say(const std::string& text) {
  int err = 0;
  write_all_or_errno(g_report_fd, text + "\n", &err);
}

struct Args {
  std::string out;
  int64_t global_batch = 16;
  int64_t epochs = 3;
  int64_t steps = 6;
  std::string logdir;
  bool bn = false;
  int64_t timeout_ms = 20000;
  int64_t join_timeout_ms = 20000;
  int64_t accumulate = 1;
  uint64_t data_seed = 3;
  // What happens at which step, on which rank (-1: every rank).
  int64_t wait_signal_at = -1, wait_rank = -1;
  int64_t stop_at = -1, stop_rank = -1;
  int64_t throw_at = -1, throw_rank = -1;
  // Before joining, on rank `before_join_rank` (-1: every rank): report `fail_before_join` and
  // exit 2, or (never_join) wait until killed.
  std::string fail_before_join;
  bool never_join = false;
  int64_t before_join_rank = -1;
};

struct NetImpl : torch::nn::Module {
  explicit NetImpl(bool bn) {
    fc1 = register_module("fc1", torch::nn::Linear(3, 16));
    if (bn) norm = register_module("norm", torch::nn::BatchNorm1d(16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = fc1->forward(x);
    if (norm) x = norm->forward(x);
    return fc2->forward(torch::tanh(x));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};
TORCH_MODULE(Net);

class Model : public ModelDesc {
 public:
  Model(bool bn, int64_t accumulate) : accumulate_(accumulate) {
    torch::manual_seed(7);
    net_ = Net(bn);
  }
  InputSignature inputs() const override {
    return {InputDesc("x", {-1, 3}), InputDesc("y", {-1, 1})};
  }
  std::shared_ptr<torch::nn::Module> module() override { return net_.ptr(); }
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    // DataParallelTrainer broadcast the chief's buffers just before this forward.
    for (const auto& b : net_->buffers()) {
      at::Tensor c = b.detach().contiguous();
      seen_buffers_.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
    }
    // With accumulation: the gradient the earlier micro-batches of this step left (not yet
    // all-reduced, if the trainer is right).
    if (accumulate_ > 1 && tower_calls_++ % accumulate_ != 0) {
      at::Tensor g = net_->fc1->weight.grad().detach().contiguous();
      micro_grads_.append(static_cast<const char*>(g.data_ptr()), g.nbytes());
    }
    auto cost = torch::mse_loss(net_->forward(in[0]), in[1]);
    ctx.add_moving_summary("cost", cost);
    return cost;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::SGD>(net_->parameters(),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  Net& net() { return net_; }
  const std::string& seen_buffers() const { return seen_buffers_; }
  const std::string& micro_grads() const { return micro_grads_; }

 private:
  Net net_{nullptr};
  int64_t accumulate_;
  int64_t tower_calls_ = 0;
  std::string seen_buffers_;
  std::string micro_grads_;
};

// Reports progress and injects the stops and failures the options ask for.
class Scenario : public Callback {
 public:
  explicit Scenario(const Args& args) : args_(args) { set_chief_only(false); }
  std::string name() const override { return "Scenario"; }

 protected:
  void _before_train() override {
    const ResumePoint p = trainer().resume_point();
    say(fmt::format("start {} {} {}", p.global_step, p.epoch, p.step_in_epoch));
  }
  void _trigger_step() override {
    const int64_t gs = global_step();
    say(fmt::format("step {}", gs));
    if (gs == args_.wait_signal_at && mine(args_.wait_rank)) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (trainpack::detail::pending_signal() == 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    if (gs == args_.stop_at && mine(args_.stop_rank)) {
      throw StopTraining(fmt::format("the test stops rank {} at step {}", rank(), gs));
    }
    if (gs == args_.throw_at && mine(args_.throw_rank)) {
      throw std::runtime_error(fmt::format("injected failure at global_step {}", gs));
    }
  }

 private:
  int64_t rank() const { return trainer().rank(); }
  bool mine(int64_t only) const { return only < 0 || only == rank(); }
  Args args_;
};

Args parse(int argc, char** argv) {
  Args a;
  std::vector<std::string> positional;
  int64_t only = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--logdir") {
      a.logdir = value();
    } else if (arg == "--bn") {
      a.bn = true;
    } else if (arg == "--data-seed") {
      a.data_seed = std::stoull(value());
    } else if (arg == "--accumulate") {
      a.accumulate = std::stoll(value());
    } else if (arg == "--timeout-ms") {
      a.timeout_ms = std::stoll(value());
    } else if (arg == "--join-timeout-ms") {
      a.join_timeout_ms = std::stoll(value());
    } else if (arg == "--fail-before-join") {
      a.fail_before_join = value();
      a.before_join_rank = only;
    } else if (arg == "--never-join") {
      a.never_join = true;
      a.before_join_rank = only;
    } else if (arg == "--only-rank") {
      only = std::stoll(value());
    } else if (arg == "--wait-signal-at") {
      a.wait_signal_at = std::stoll(value());
      a.wait_rank = only;
    } else if (arg == "--stop-at") {
      a.stop_at = std::stoll(value());
      a.stop_rank = only;
    } else if (arg == "--throw-at") {
      a.throw_at = std::stoll(value());
      a.throw_rank = only;
    } else if (arg.rfind("--", 0) == 0) {
      throw std::invalid_argument("unknown option " + arg);
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.empty() || positional.size() > 4) {
    throw std::invalid_argument(
        "usage: trainpack_dp_worker <out file> [global batch] [epochs] [steps per epoch] "
        "[options]");
  }
  a.out = positional[0];
  if (positional.size() > 1) a.global_batch = std::stoll(positional[1]);
  if (positional.size() > 2) a.epochs = std::stoll(positional[2]);
  if (positional.size() > 3) a.steps = std::stoll(positional[3]);
  return a;
}

void write_tensors(const std::string& path, const std::vector<at::Tensor>& tensors) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& t : tensors) {
    at::Tensor c = t.detach().contiguous();
    out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  }
  if (!out) throw std::runtime_error("cannot write " + path);
}

int run(const Args& args) {
  torch::set_num_threads(1);
  const DistributedOptions options =
      DistributedOptions()
          .timeout(std::chrono::milliseconds(args.timeout_ms))
          .join_timeout(std::chrono::milliseconds(args.join_timeout_ms));
  const DistributedEnv env = DistributedEnv::from_environment();
  if (args.before_join_rank < 0 || args.before_join_rank == env.rank) {
    if (!args.fail_before_join.empty()) {
      ProcessGroup::report_failure_before_joining(args.fail_before_join, options);
      say("failed before joining");
      return 2;
    }
    if (args.never_join) {
      say("never joining");
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  auto group = ProcessGroup::from_environment(options);
  std::vector<Datapoint> points;
  for (int i = 0; i < 96; ++i) {
    const float a = std::sin(0.37f * static_cast<float>(i));
    const float b = std::cos(0.91f * static_cast<float>(i));
    const float c = static_cast<float>(i % 9) / 4.0f - 1.0f;
    points.push_back({torch::tensor({a, b, c}), torch::tensor({a * b - c})});
  }
  DataFlowPtr flow = std::make_shared<DataFromList>(
      points, DataFromListOptions().shuffle(true).seed(args.data_seed));
  flow = std::make_shared<ShardData>(flow, group->rank(), group->world_size());
  flow = std::make_shared<BatchData>(flow, args.global_batch / group->world_size());

  auto model = std::make_shared<Model>(args.bn, args.accumulate);
  TrainConfig config = TrainConfig()
                           .model(model)
                           .dataflow(flow)
                           .steps_per_epoch(args.steps)
                           .max_epoch(args.epochs)
                           .accumulate_steps(args.accumulate);
  std::vector<CallbackPtr> callbacks;
  if (!args.logdir.empty()) {
    logger::set_logger_dir(args.logdir, 'k');
    // Before the Scenario: the checkpoint of step G exists when the Scenario stops at G.
    callbacks.push_back(std::make_shared<PeriodicTrigger>(
        std::make_shared<ModelSaver>(ModelSaverOptions().max_to_keep(3)),
        PeriodicTriggerOptions().every_k_steps(1)));
  }
  callbacks.push_back(std::make_shared<Scenario>(args));
  if (!args.logdir.empty()) {
    config.callbacks(callbacks);
    config = AutoResumeTrainConfig(config);
  } else {
    config.callbacks(callbacks).extra_callbacks({}).monitors({});
  }
  DataParallelTrainer trainer(group);
  launch_train_with_config(config, trainer);
  say(fmt::format("end {} {}", trainer.global_step(), trainer.received_signal()));

  write_tensors(args.out, model->net()->parameters());
  if (args.accumulate > 1) {
    std::ofstream out(args.out + ".micro_grads", std::ios::binary);
    out << model->micro_grads();
    if (!out) throw std::runtime_error("cannot write " + args.out + ".micro_grads");
  }
  if (args.bn) {
    std::ofstream out(args.out + ".buffers", std::ios::binary);
    out << model->seen_buffers();
    if (!out) throw std::runtime_error("cannot write " + args.out + ".buffers");
  }
  return exit_code_for_signal(trainer.received_signal());
}

}  // namespace dp_worker

// The program's main, run by trainpack_test_programs (tests/programs/main.cpp) when it is started
// as trainpack_dp_worker.
int dp_worker_main(int argc, char** argv) {
  using namespace dp_worker;  // NOLINT(google-build-using-namespace): its own helpers
  // The logger writes to stdout: keep stdout for the reports alone.
  g_report_fd = ::dup(STDOUT_FILENO);
  if (g_report_fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    std::perror("trainpack_dp_worker: dup");
    return 1;
  }
  try {
    return run(parse(argc, argv));
  } catch (const DistributedError& e) {
    std::fprintf(stderr, "trainpack_dp_worker: DistributedError (failed rank %lld): %s\n",
                 static_cast<long long>(e.failed_rank()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainpack_dp_worker: %s\n", e.what());
    return 1;
  }
}
