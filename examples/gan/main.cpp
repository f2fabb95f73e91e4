// gan: a GAN learns a mixture of 8 Gaussians on a circle (radius 2, std 0.05), trained by a
// custom trainer whose run_step updates the generator and the discriminator, as tensorpack's
// examples/GAN/GAN.py does with its GANTrainer. It shows the three things a trainer of its own
// needs (docs/gan.md):
//   - a TowerTrainer subclass that sets the tower function (GanModel::build_graph), registers
//     the input source's callbacks and overrides run_step();
//   - run_step(): one hooked_run per iteration, in which the tower runs once and both
//     optimizers step, G then D (tensorpack: `train_op = d_min` with a control dependency on
//     g_min, run by one `hooked_sess.run`);
//   - the tower publishes "d_loss" and "g_loss" (ctx.output, for the progress bar) and their
//     moving averages (ctx.add_moving_summary, for the monitors: log, stats.json, TensorBoard).
// The learning rate of both optimizers is the graph variable "learning_rate", scheduled by a
// ScheduledHyperParamSetter. At the end of every epoch DumpTensorAsImage writes a scatter plot of
// generated samples over real ones, `samples-ep<NNN>-0.png`, into the logger directory.
//
// At the end, generated samples are scored: a sample is of high quality when it lies within 3
// std of a mode, and a mode is covered when it holds at least 1% of the samples that way. The
// program exits with status 1 unless at least 6 of the 8 modes are covered and at least half of
// the samples are of high quality (`--no-check` skips this, for smoke tests); 130/143 when stopped
// by SIGINT/SIGTERM.
//
//   gan [--max-epoch 16] [--steps-per-epoch 250] [--batch-size 256] [--lr 1e-3] [--r1-gamma 1]
//       [--seed 42] [--threads 1] [--logdir train_log/gan] [--no-check]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainpack/trainpack.h"

namespace {

constexpr int64_t kModes = 8;
constexpr double kRadius = 2.0;
constexpr double kStd = 0.05;
constexpr int64_t kZDim = 16;
constexpr int64_t kHidden = 128;
constexpr int64_t kImageSize = 256;
constexpr double kPlotHalfWidth = 2.6;  // the plot shows [-2.6, 2.6]^2
constexpr int64_t kEvalSamples = 4000;

// The centres of the modes, [kModes, 2], evenly spaced on the circle.
torch::Tensor mode_centres() {
  torch::Tensor angle = torch::arange(kModes, torch::kDouble) * (2 * M_PI / kModes);
  return torch::stack({torch::cos(angle), torch::sin(angle)}, 1).to(torch::kFloat) * kRadius;
}

// `n` real samples: a uniformly chosen mode plus N(0, kStd^2) noise, [n, 2].
torch::Tensor sample_real(int64_t n, const torch::Tensor& centres, at::Generator& gen) {
  torch::Tensor mode = torch::randint(kModes, {n}, gen, torch::kLong);
  return centres.index_select(0, mode) + kStd * torch::randn({n, 2}, gen);
}

// ---- the model (tensorpack's GANModelDesc) ----

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t out)
      : fc1(register_module("fc1", torch::nn::Linear(in, kHidden))),
        fc2(register_module("fc2", torch::nn::Linear(kHidden, kHidden))),
        fc3(register_module("fc3", torch::nn::Linear(kHidden, out))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::leaky_relu(fc1->forward(x), 0.2);
    x = torch::leaky_relu(fc2->forward(x), 0.2);
    return fc3->forward(x);
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

// The generator ("gen": z -> a point) and the discriminator ("discrim": a point -> logit) in one
// module, so that the trainer, its predictors and the graph's trainable variables see both.
struct GanNetImpl : torch::nn::Module {
  GanNetImpl()
      : gen(register_module("gen", Mlp(kZDim, 2))),
        discrim(register_module("discrim", Mlp(2, 1))) {}
  Mlp gen, discrim;
};
TORCH_MODULE(GanNet);

// The tower function and the losses (tensorpack's GANModelDesc.build_losses): the standard GAN
// losses on logits, with the non-saturating generator loss, plus an R1 penalty on D (gamma/2 times
// the squared norm of D's gradient at the real samples; Mescheder et al., 2018), which keeps the
// plain GAN from dropping modes of the mixture (without it, 5 to 7 of the 8 modes are found here).
class GanModel {
 public:
  explicit GanModel(double r1_gamma) : r1_gamma_(r1_gamma) {}

  trainpack::InputSignature inputs() const {
    return {trainpack::InputDesc("real", {-1, 2}), trainpack::InputDesc("z", {-1, kZDim})};
  }
  GanNet& net() { return net_; }

  // The tower: fake = G(z), published as "gen"; with real samples (training), D on both and the
  // losses. A predictor feeds only "z" (then `in[0]` is undefined) and reads "gen".
  at::Tensor build_graph(trainpack::TowerContext& ctx, const std::vector<at::Tensor>& in) {
    torch::Tensor fake = net_->gen->forward(in[1]);
    ctx.output("gen", fake);
    if (!in[0].defined()) return {};

    const bool r1 = ctx.is_training() && r1_gamma_ > 0;
    torch::Tensor real = r1 ? in[0].detach().requires_grad_(true) : in[0];
    torch::Tensor logits_real = net_->discrim->forward(real).squeeze(1);
    torch::Tensor logits_fake = net_->discrim->forward(fake).squeeze(1);
    namespace F = torch::nn::functional;
    auto bce = [](const torch::Tensor& logits, double label) {
      return F::binary_cross_entropy_with_logits(logits, torch::full_like(logits, label));
    };
    d_loss = 0.5 * bce(logits_real, 1.0) + 0.5 * bce(logits_fake, 0.0);
    g_loss = bce(logits_fake, 1.0);
    if (r1) {
      torch::Tensor grad = torch::autograd::grad({logits_real.sum()}, {real}, {},
                                                 /*retain_graph=*/true, /*create_graph=*/true)[0];
      torch::Tensor penalty = grad.pow(2).sum(1).mean();
      ctx.add_moving_summary("r1_penalty", penalty);
      d_loss = d_loss + 0.5 * r1_gamma_ * penalty;
    }

    torch::Tensor score_real = torch::sigmoid(logits_real).detach();
    torch::Tensor score_fake = torch::sigmoid(logits_fake).detach();
    torch::Tensor d_accuracy = 0.5 * score_real.gt(0.5).to(torch::kFloat).mean() +
                               0.5 * score_fake.lt(0.5).to(torch::kFloat).mean();
    torch::Tensor g_accuracy = score_fake.gt(0.5).to(torch::kFloat).mean();

    ctx.output("d_loss", d_loss);
    ctx.output("g_loss", g_loss);
    ctx.add_moving_summary("d_loss", d_loss);
    ctx.add_moving_summary("g_loss", g_loss);
    ctx.add_moving_summary("d_accuracy", d_accuracy);
    ctx.add_moving_summary("g_accuracy", g_accuracy);
    ctx.summary_histogram("score-real", score_real);
    ctx.summary_histogram("score-fake", score_fake);
    return d_loss;
  }

  // Set by build_graph for the trainer to minimise (tensorpack's model.d_loss / model.g_loss).
  torch::Tensor d_loss, g_loss;

 private:
  double r1_gamma_;
  GanNet net_;
};

// ---- the trainer (tensorpack's GANTrainer) ----

// Renders `real` and `fake` points ([n, 2] each) as a kImageSize x kImageSize RGB image in [0, 1]
// (white background, real samples light blue, generated samples red, 2x2 pixels per point).
torch::Tensor scatter_image(const torch::Tensor& real, const torch::Tensor& fake) {
  torch::Tensor image = torch::ones({kImageSize, kImageSize, 3});
  auto plot = [&](const torch::Tensor& points, std::vector<float> rgb) {
    torch::Tensor p = ((points + kPlotHalfWidth) * (kImageSize / (2 * kPlotHalfWidth))).floor();
    torch::Tensor col = p.select(1, 0).to(torch::kLong);
    torch::Tensor row = (kImageSize - 1) - p.select(1, 1).to(torch::kLong);  // y grows upwards
    torch::Tensor colour = torch::tensor(rgb);
    for (int64_t dy = 0; dy < 2; ++dy) {
      for (int64_t dx = 0; dx < 2; ++dx) {
        torch::Tensor r = row + dy, c = col + dx;
        torch::Tensor inside = r.ge(0) & r.lt(kImageSize) & c.ge(0) & c.lt(kImageSize);
        image.index_put_({r.masked_select(inside), c.masked_select(inside)}, colour);
      }
    }
  };
  plot(real, {0.55f, 0.75f, 1.0f});
  plot(fake, {0.85f, 0.1f, 0.1f});
  return image;
}

// One iteration = one hooked run, in which the tower runs once on one batch and both players
// take a step: first G (minimising g_loss over the generator's parameters), then D (d_loss over
// the discriminator's). This is tensorpack's GANTrainer: it builds
//   g_min = opt.minimize(g_loss, var_list=g_vars)
//   with tf.control_dependencies([g_min]): d_min = opt.minimize(d_loss, var_list=d_vars)
//   train_op = d_min
// and its run_step is the inherited `hooked_sess.run(train_op)`: ONE hooked run per step, so the
// callbacks see one before_run/after_run per iteration, global_step counts iterations, and the
// losses they fetch are those of the forward pass both updates used. (Two hooked runs, one per
// player, as tensorpack's SeparateGANTrainer does, would count two global steps per iteration
// and run every per-step callback twice.) As in TensorFlow, both gradients come from the same
// forward pass, so D's update sees the samples of G before G's update: the gradients are
// computed first (each restricted to its player's parameters, like var_list), then the two
// optimizers step in tensorpack's order.
class GanTrainer : public trainpack::TowerTrainer {
 public:
  GanTrainer(trainpack::InputSourcePtr input, std::shared_ptr<GanModel> model, double lr,
             uint64_t seed)
      : input_(std::move(input)), model_(std::move(model)) {
    // The input source's callbacks run before every other callback (tensorpack:
    // `self.register_callback(input.setup(...))` in GANTrainer.__init__).
    for (auto& cb : input_->setup(model_->inputs(), device())) register_callback(std::move(cb));
    GanModel* m = model_.get();
    set_tower_func([m](trainpack::TowerContext& ctx,
                       const std::vector<at::Tensor>& in) { return m->build_graph(ctx, in); },
                   model_->inputs(), model_->net().ptr());

    GanNet& net = model_->net();
    g_vars_ = net->gen->parameters();
    d_vars_ = net->discrim->parameters();
    const auto options = torch::optim::AdamOptions(lr).betas({0.5, 0.9});
    g_opt_ = std::make_unique<torch::optim::Adam>(g_vars_, options);
    d_opt_ = std::make_unique<torch::optim::Adam>(d_vars_, options);
    graph().add_variable(
        "learning_rate", [this] { return g_opt_->param_groups().front().options().get_lr(); },
        [this](double v) {
          for (auto* opt : {g_opt_.get(), d_opt_.get()}) {
            for (auto& group : opt->param_groups()) group.options().set_lr(v);
          }
        });
    for (const auto& p : net->named_parameters()) {
      graph().add_trainable_variable(p.key(), p.value());
    }
    // For ModelSaver / SaverRestore: one module (its names start with gen. and discrim.) and
    // the two optimizers.
    graph().add_module("", net.ptr());
    graph().add_optimizer("gen", g_opt_.get());
    graph().add_optimizer("discrim", d_opt_.get());

    // What the image shows: fixed real samples and a fixed batch of z.
    at::Generator gen = at::detail::createCPUGenerator(seed + 1);
    plot_real_ = sample_real(1024, mode_centres(), gen);
    plot_z_ = torch::randn({1024, kZDim}, gen);
  }

  void run_step() override {
    hooked_run([this](trainpack::StepContext& ctx) {
      const std::vector<at::Tensor> batch = input_->next_batch();
      trainpack::TowerContext tower("tower0", /*is_training=*/true, &ctx, &tower_registry());
      tower_func()(tower, batch);

      g_opt_->zero_grad();
      d_opt_->zero_grad();
      model_->g_loss.backward({}, /*retain_graph=*/true, /*create_graph=*/false, g_vars_);
      model_->d_loss.backward({}, /*retain_graph=*/false, /*create_graph=*/false, d_vars_);
      g_opt_->step();
      d_opt_->step();

      // The scatter plot costs a generator pass and some indexing: made only when a callback
      // (DumpTensorAsImage, in the last step of each epoch) asks for it.
      if (ctx.is_requested("samples")) {
        torch::NoGradGuard no_grad;
        ctx.publish("samples", scatter_image(plot_real_, model_->net()->gen->forward(plot_z_)));
      }
    });
  }

 private:
  trainpack::InputSourcePtr input_;
  std::shared_ptr<GanModel> model_;
  std::vector<torch::Tensor> g_vars_, d_vars_;
  std::unique_ptr<torch::optim::Adam> g_opt_, d_opt_;
  torch::Tensor plot_real_, plot_z_;
};

// ---- scoring ----

struct Quality {
  double high_quality = 0;  // fraction of samples within 3 std of a mode
  int64_t modes = 0;        // modes holding at least 1% of the samples that way
};

Quality score(const torch::Tensor& samples) {
  const torch::Tensor centres = mode_centres();
  // [n, kModes] distances; the nearest mode of each sample.
  auto [dist, nearest] = torch::cdist(samples, centres).min(1);
  const torch::Tensor good = dist.lt(3 * kStd);
  Quality q;
  q.high_quality = good.to(torch::kDouble).mean().item<double>();
  const torch::Tensor counts = torch::bincount(nearest.masked_select(good), {}, kModes);
  q.modes = counts.ge(static_cast<int64_t>(0.01 * static_cast<double>(samples.size(0))))
                .sum()
                .item<int64_t>();
  return q;
}

}  // namespace

int run_main(int argc, char** argv) {
  int64_t max_epoch = 16;
  int64_t steps_per_epoch = 250;
  int64_t batch_size = 256;
  double lr = 1e-3;
  double r1_gamma = 1.0;
  uint64_t seed = 42;
  int threads = 1;
  bool check = true;
  std::string logdir = "train_log/gan";

  const CLI::Range kPositive(1, 1000000000);
  CLI::App app{"gan: a GAN on a mixture of 8 Gaussians, trained by a custom trainpack trainer"};
  app.add_option("--max-epoch", max_epoch, "Number of epochs")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--steps-per-epoch", steps_per_epoch, "Iterations (a G and a D step) per epoch")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--batch-size", batch_size, "Real samples (and z vectors) per batch")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--lr", lr,
                 "Learning rate of both Adam optimizers (divided by 10 for the "
                 "last quarter of the epochs)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--r1-gamma", r1_gamma,
                 "Weight of the R1 penalty on the discriminator (0: the plain GAN losses)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "Seed of the initialisation and of the data")
      ->capture_default_str();
  app.add_option("--threads", threads,
                 "Intra-op threads (torch::set_num_threads); the layers are too small for more "
                 "threads to pay, see docs/gan.md")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--logdir", logdir,
                 "Log directory (log.log, stats.json, TensorBoard events, samples-ep*.png); an "
                 "existing one is backed up to <logdir>.<MMDD-HHMMSS>")
      ->capture_default_str();
  app.add_flag("--check,!--no-check", check,
               "Exit with status 1 when the GAN did not learn the modes (default: on)");
  CLI11_PARSE(app, argc, argv);

  trainpack::logger::set_logger_dir(logdir, 'b');  // a previous run's directory is moved aside
  torch::set_num_threads(threads);  // Debian's LibTorch starts with one intra-op thread
  torch::manual_seed(seed);         // the initialisation
  std::printf(
      "gan: %d intra-op threads, seed %llu, %lld epochs x %lld steps, batch %lld, lr %g, R1 "
      "gamma %g\n",
      torch::get_num_threads(), static_cast<unsigned long long>(seed),
      static_cast<long long>(max_epoch), static_cast<long long>(steps_per_epoch),
      static_cast<long long>(batch_size), lr, r1_gamma);

  // The data: every datapoint is a whole batch {real [B, 2], z [B, kZDim]}, drawn from its own
  // generator (tensorpack's examples add a RandomZData flow the same way). Drawing it costs far
  // less than the step, so FeedInput (on the training thread) is enough; tensorpack's GANTrainer
  // uses QueueInput, which is a one-line change here.
  auto data_gen = std::make_shared<at::Generator>(at::detail::createCPUGenerator(seed));
  const torch::Tensor centres = mode_centres();
  auto batches = std::make_shared<trainpack::DataFromGenerator>(
      [data_gen, centres, batch_size]() -> std::optional<trainpack::Datapoint> {
        return trainpack::Datapoint{sample_real(batch_size, centres, *data_gen),
                                    torch::randn({batch_size, kZDim}, *data_gen)};
      });

  auto model = std::make_shared<GanModel>(r1_gamma);
  GanTrainer trainer(std::make_shared<trainpack::FeedInput>(batches), model, lr, seed);

  // Scoring uses a predictor: the tower in inference mode on z alone (tensorpack's
  // trainer.get_predictor(['z'], ['gen'])).
  auto predict = trainer.get_predictor({"z"}, {"gen"});
  at::Generator eval_gen = at::detail::createCPUGenerator(seed + 2);
  const torch::Tensor eval_z = torch::randn({kEvalSamples, kZDim}, eval_gen);
  const Quality before = score((*predict)({eval_z})[0]);
  std::printf("before training: %.1f%% high-quality samples, %lld of %lld modes covered\n",
              100 * before.high_quality, static_cast<long long>(before.modes),
              static_cast<long long>(kModes));

  trainpack::ScheduledHyperParamSetter::Schedule schedule{{0, lr}};
  if (max_epoch * 3 / 4 > 0) schedule.emplace_back(max_epoch * 3 / 4, lr / 10);
  trainer.train_with_defaults(
      trainpack::TrainOptions()
          .callbacks({
              std::make_shared<trainpack::ScheduledHyperParamSetter>("learning_rate", schedule),
              // The image the step publishes as "samples" (values in [0, 1], scaled by 255).
              std::make_shared<trainpack::DumpTensorAsImage>("samples"),
          })
          // tensorpack's defaults, with the progress bar showing both losses.
          .extra_callbacks(std::vector<trainpack::CallbackPtr>{
              std::make_shared<trainpack::MovingAverageSummary>(),
              std::make_shared<trainpack::ProgressBar>(
                  std::vector<std::string>{"d_loss", "g_loss"}),
              trainpack::MergeAllSummaries(),
              std::make_shared<trainpack::RunUpdateOps>(),
          })
          .steps_per_epoch(steps_per_epoch)
          .max_epoch(max_epoch));
  if (trainer.received_signal() != 0) {
    return trainpack::exit_code_for_signal(trainer.received_signal());
  }

  const Quality after = score((*predict)({eval_z})[0]);
  std::printf(
      "after training: %.1f%% high-quality samples (within 3 std of a mode), %lld of "
      "%lld modes covered\n",
      100 * after.high_quality, static_cast<long long>(after.modes),
      static_cast<long long>(kModes));
  std::printf("images: %s/samples-ep*.png\n", logdir.c_str());
  if (check && (after.modes < 6 || after.high_quality < 0.5)) {
    std::fprintf(stderr,
                 "gan: FAILED: the generator did not learn the mixture (needs >= 6 modes and "
                 ">= 50%% high-quality samples)\n");
    return 1;
  }
  std::printf("gan: %s\n", check ? "OK" : "done (not checked)");
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
