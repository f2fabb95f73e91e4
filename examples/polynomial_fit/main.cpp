// polynomial_fit: trainpack's smallest real job. A small MLP learns a noisy cubic
//   y = 0.5 x^3 - x^2 + 0.5 x + 1 + noise,   x in [-2, 2],   noise ~ N(0, 0.1^2)
// from generated data, trained by a Trainer with a custom run_step (forward, MSE loss, backward,
// SGD step inside hooked_run, publishing the loss as "cost"). Three callbacks fire:
//   - ScheduledHyperParamSetter on "learning_rate" (a graph variable bound to the optimizer's lr)
//     sets --lr before training, lr/3 after epoch max/2 and lr/10 after epoch 3*max/4;
//   - EpochLoss fetches "cost" every step and puts the epoch's mean into the monitors as
//     "epoch_mean_cost";
//   - PeriodicTrigger runs Progress every --print-every epochs: it evaluates the held-out MSE and
//     prints it with the epoch's mean training loss and the current learning rate.
// The program exits with status 1 unless the held-out MSE fell below 10% of its value before
// training, and with 130/143 when stopped by SIGINT/SIGTERM.
//
//   polynomial_fit [--max-epoch 40] [--steps-per-epoch 50] [--lr 0.05] [--seed 42] [--threads 2]
//                  [--print-every 5]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainpack/trainpack.h"

namespace {

constexpr int64_t kTrainSize = 2048;
constexpr int64_t kTestSize = 512;
constexpr int64_t kBatchSize = 64;
constexpr double kNoiseStd = 0.1;

torch::Tensor target_function(const torch::Tensor& x) {
  return 0.5 * x.pow(3) - x.pow(2) + 0.5 * x + 1.0;
}

// `n` points: x uniform in [-2, 2], y = f(x) + noise. Both are [n, 1].
std::pair<torch::Tensor, torch::Tensor> make_data(int64_t n) {
  torch::Tensor x = torch::rand({n, 1}) * 4.0 - 2.0;
  torch::Tensor y = target_function(x) + kNoiseStd * torch::randn({n, 1});
  return {x, y};
}

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(1, 32))),
        fc2(register_module("fc2", torch::nn::Linear(32, 32))),
        out(register_module("out", torch::nn::Linear(32, 1))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(fc1->forward(x));
    x = torch::tanh(fc2->forward(x));
    return out->forward(x);
  }
  torch::nn::Linear fc1, fc2, out;
};
TORCH_MODULE(Mlp);

// One step: a random minibatch, forward, MSE loss, backward, SGD step. The learning rate is the
// graph variable "learning_rate", bound to every param group of the optimizer, so that
// hyperparameter setters (and checkpoints) see and change it.
class PolyFitTrainer : public trainpack::Trainer {
 public:
  PolyFitTrainer(Mlp model, torch::Tensor x, torch::Tensor y, double lr)
      : model_(std::move(model)),
        x_(std::move(x)),
        y_(std::move(y)),
        optimizer_(model_->parameters(), torch::optim::SGDOptions(lr).momentum(0.9)) {
    graph().add_variable(
        "learning_rate",
        [this] {
          return static_cast<torch::optim::SGDOptions&>(optimizer_.param_groups().front().options())
              .lr();
        },
        [this](double v) {
          for (auto& group : optimizer_.param_groups()) {
            static_cast<torch::optim::SGDOptions&>(group.options()).lr(v);
          }
        });
  }

  void run_step() override {
    hooked_run([this](trainpack::StepContext& ctx) {
      const torch::Tensor idx = torch::randint(x_.size(0), {kBatchSize}, torch::kLong);
      optimizer_.zero_grad();
      torch::Tensor loss =
          torch::mse_loss(model_->forward(x_.index_select(0, idx)), y_.index_select(0, idx));
      loss.backward();
      optimizer_.step();
      ctx.publish("cost", loss.detach());
    });
  }

 private:
  Mlp model_;
  torch::Tensor x_, y_;
  torch::optim::SGD optimizer_;
};

// Fetches "cost" in every step and, at each epoch end, puts the epoch's mean into the monitors as
// "epoch_mean_cost". The sum stays a tensor during the epoch: no per-step host sync.
class EpochLoss : public trainpack::Callback {
 public:
  EpochLoss() : fetch_({"cost"}) {}

 protected:
  void _before_epoch() override {
    sum_ = torch::zeros({});
    count_ = 0;
  }
  trainpack::RunArgs _before_run(const trainpack::StepContext&) override {
    return trainpack::RunArgs::ref(fetch_);
  }
  void _after_run(const trainpack::StepContext&, const trainpack::RunValues& values) override {
    sum_ += values["cost"];
    ++count_;
  }
  void _trigger_epoch() override {
    if (count_ == 0) return;
    trainer().monitors().put_scalar("epoch_mean_cost",
                                    sum_.item<double>() / static_cast<double>(count_));
  }

 private:
  trainpack::RunArgs fetch_;
  torch::Tensor sum_;
  int64_t count_ = 0;
};

// Prints the held-out MSE, the epoch's mean training loss and the learning rate when triggered.
class Progress : public trainpack::Callback {
 public:
  explicit Progress(std::function<double()> evaluate) : evaluate_(std::move(evaluate)) {}

 protected:
  void _trigger() override {
    std::printf("epoch %3lld  step %6lld  train_mse %.5f  test_mse %.5f  lr %.5f\n",
                static_cast<long long>(epoch_num()), static_cast<long long>(global_step()),
                trainer().monitors().get_latest("epoch_mean_cost"), evaluate_(),
                graph().variable("learning_rate").get());
    std::fflush(stdout);
  }

 private:
  std::function<double()> evaluate_;
};

}  // namespace

int run_main(int argc, char** argv) {
  int64_t max_epoch = 40;
  int64_t steps_per_epoch = 50;
  double lr = 0.05;
  uint64_t seed = 42;
  int threads = 2;
  int64_t print_every = 5;
  std::string logdir = "train_log/polynomial_fit";

  const CLI::Range kPositive(1, 1000000000);
  CLI::App app{"polynomial_fit: fit a noisy cubic with a small MLP, trained by trainpack"};
  app.add_option("--max-epoch", max_epoch, "Number of epochs")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--steps-per-epoch", steps_per_epoch, "Steps (minibatches of 64) per epoch")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--lr", lr, "Initial learning rate (SGD, momentum 0.9)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "Seed of torch::manual_seed (data, init and batches)")
      ->capture_default_str();
  app.add_option("--threads", threads, "Intra-op threads (torch::set_num_threads)")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--print-every", print_every, "Print progress every this many epochs")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--logdir", logdir,
                 "Log directory (log.log, stats.json, TensorBoard events); an existing one is "
                 "backed up to <logdir>.<MMDD-HHMMSS>")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // 'b': a previous run's directory is moved aside, never deleted.
  trainpack::logger::set_logger_dir(logdir, 'b');

  // Debian's LibTorch starts with one intra-op thread; set the count explicitly.
  torch::set_num_threads(threads);
  torch::manual_seed(seed);
  std::printf("polynomial_fit: %d intra-op threads, seed %llu, %lld epochs x %lld steps, lr %g\n",
              torch::get_num_threads(), static_cast<unsigned long long>(seed),
              static_cast<long long>(max_epoch), static_cast<long long>(steps_per_epoch), lr);

  auto [x_train, y_train] = make_data(kTrainSize);
  auto [x_test, y_test] = make_data(kTestSize);
  Mlp model;

  auto evaluate = [&]() -> double {
    torch::NoGradGuard no_grad;
    return torch::mse_loss(model->forward(x_test), y_test).item<double>();
  };
  const double initial_mse = evaluate();
  std::printf("initial test_mse %.5f (noise floor %.5f)\n", initial_mse, kNoiseStd * kNoiseStd);

  PolyFitTrainer trainer(model, x_train, y_train, lr);

  // The learning-rate schedule, in epochs: (0, lr) is set in before_train, and (N, v) takes effect
  // after epoch N, so it holds from epoch N+1 on. Points must be strictly increasing, so a short
  // run keeps only those that fit.
  trainpack::ScheduledHyperParamSetter::Schedule schedule{{0, lr}};
  for (auto [epoch, value] : {std::pair<int64_t, double>{max_epoch / 2, lr / 3},
                              std::pair<int64_t, double>{max_epoch * 3 / 4, lr / 10}}) {
    if (epoch > schedule.back().first) schedule.emplace_back(epoch, value);
  }
  // Epoch-end order follows the list: EpochLoss puts the epoch's mean before Progress reads it,
  // and Progress prints the learning rate the epoch used before the setter changes it.
  std::vector<trainpack::CallbackPtr> callbacks{
      std::make_shared<EpochLoss>(),
      std::make_shared<trainpack::PeriodicTrigger>(
          std::make_shared<Progress>(evaluate),
          trainpack::PeriodicTriggerOptions().every_k_epochs(print_every)),
      std::make_shared<trainpack::ScheduledHyperParamSetter>("learning_rate", schedule),
  };
  // The default monitors (TensorBoard events, stats.json, the scalar printer) write into the
  // logger directory; the default callbacks, with a progress bar that shows the cost.
  trainer.train_with_defaults(
      trainpack::TrainOptions()
          .callbacks(callbacks)
          .extra_callbacks(std::vector<trainpack::CallbackPtr>{
              std::make_shared<trainpack::ProgressBar>(std::vector<std::string>{"cost"}),
              std::make_shared<trainpack::RunUpdateOps>()})
          .steps_per_epoch(steps_per_epoch)
          .max_epoch(max_epoch));

  if (trainer.received_signal() != 0) {
    return trainpack::exit_code_for_signal(trainer.received_signal());
  }

  // It must really have learned: the held-out MSE below 10% of its value before training.
  const auto& history = trainer.monitors().get_history("epoch_mean_cost");
  if (!history.empty()) {
    std::printf("train_mse: first epoch %.5f, last epoch %.5f\n", history.front().second,
                history.back().second);
  }
  const double final_mse = evaluate();
  std::printf("test_mse: before training %.5f, after %.5f (%.2f%%)\n", initial_mse, final_mse,
              100.0 * final_mse / initial_mse);
  if (!(final_mse < 0.1 * initial_mse)) {
    std::fprintf(stderr,
                 "polynomial_fit: FAILED: the test MSE did not drop below 10%% of its value "
                 "before training\n");
    return 1;
  }
  std::printf("polynomial_fit: OK\n");
  return 0;
}

// An exception that escapes run_main (a log directory that cannot be made, a failure outside the
// training loop) ends the program with its whole chain on stderr and status 1, not an abort.
int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    trainpack::print_exception(e);
    return 1;
  }
}
