// trainpack_bench_input: trainpack's image input (ImageFolder: listing, decoding and augmenting on
// worker threads) measured alone, one side of the comparison with torchvision's ImageFolder and
// DataLoader (bench/input/torchvision_reference.py); and the main job's model trained from the
// same images as PNG files or from Fashion-MNIST's IDX arrays. bench/input/run.py makes the data
// sets, runs both sides alternately and prints the table; this program is one run of one side:
//
//   trainpack_bench_input --pipeline --root DIR [--threads N (1)] [--batch 64] [--size 32]
//       [--crop 28] [--grey] [--passes 2] [--buffer 64]
//   trainpack_bench_input --train --source idx|png [--root DIR] [--steps 200] [--warmup 20]
//       [--batch 128] [--decode-threads 1] [--threads 1] [--lr 0.1] [--weight-decay 1e-4]
//
// --pipeline: ImageFolder over DIR (root/<class>/<image>), shuffled with seed 1, decoded to RGB
// (grey with --grey), with the training augmentors ResizeShortestEdge(size), RandomCrop(crop,
// crop), Flip (horizontal, p 0.5) and Normalize (mean 0.5, std 0.25 per channel), on --threads
// worker threads (0: MapData on the calling thread), then BatchData(batch, with the remainder).
// The main thread only iterates: one whole pass untimed (the warm-up: the threads start, the
// files enter the page cache), then --passes timed passes. LibTorch's intra-op threads: 1 (the
// augmentors do not use them; stacking a batch could), and malloc's thresholds tuned, by
// trainpack::configure_runtime as a training program starts. Prints one JSON line:
//   {"side": "trainpack", "threads": N, "images": n, "seconds": s, "images_per_s": n / s, ...}
//
// --train: fashion_mnist::Model (examples/fashion_mnist/model.h: SGD, Nesterov momentum 0.9,
// weight decay) trained by SimpleTrainer through launch_train_with_config, for --warmup +
// --steps steps in one epoch, fed by a QueueInput (given as TrainConfig::data: with a dataflow,
// launch_train_with_config gives a SimpleTrainer FeedInput, which produces the batch on the
// training thread) over BatchData(batch) of
//   idx: trainpack::FashionMnist("train") from --root (default: Debian's dataset-fashion-mnist),
//        shuffled with seed 1; images float [28, 28] in [0, 1];
//   png: ImageFolder over --root (an export of image_folder --export-fashion-mnist), shuffled
//        with seed 1, grey, augmentors {Normalize(mean 0, std 1)} (x / 255), on --decode-threads
//        worker threads, then a MapData that drops the channel dimension ([1, 28, 28] ->
//        [28, 28]).
// trainpack::configure_runtime sets --threads intra-op threads (default 1), 1 OpenBLAS thread and
// the tuned malloc, as the main job. A callback reads steady_clock at every step's end; steps/s is
// --steps over the time from the end of step --warmup to the end of the last one. Prints:
//   {"side": "trainpack", "source": "png", "steps": K, "steps_per_s": r, ...}
//
// Exit status: 0 measured; 1 failed (the reason on stderr); 2 bad flags.
#include <time.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fashion_mnist/model.h"
#include "support.h"
#include "trainpack/input/image_folder.h"
#include "trainpack/input/imgaug.h"
#include "trainpack/trainpack.h"
#include "trainpack/utils/image_decode.h"
#include "trainpack/utils/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  enum class Mode { kNone, kPipeline, kTrain } mode = Mode::kNone;
  std::string root;
  int64_t threads = 1;  // --pipeline: ImageFolder's worker threads; --train: intra-op threads
  int64_t batch = 0;    // 0: the mode's default (64, 128)
  int64_t size = 32;
  int64_t crop = 28;
  bool grey = false;
  int64_t passes = 2;
  int64_t buffer = 64;
  std::string source;
  int64_t steps = 200;
  int64_t warmup = 20;
  int64_t decode_threads = 1;
  double lr = 0.1;
  double weight_decay = 1e-4;
};

void usage(std::FILE* out, const char* argv0) {
  std::fprintf(out,
               "usage: %s --pipeline --root DIR [--threads N (1; 0: on the calling thread)] "
               "[--batch 64] [--size 32] [--crop 28] [--grey] [--passes 2] [--buffer 64]\n"
               "       %s --train --source idx|png [--root DIR] [--steps 200] [--warmup 20] "
               "[--batch 128] [--decode-threads 1] [--threads 1] [--lr 0.1] "
               "[--weight-decay 1e-4]\n",
               argv0, argv0);
}

// A non-negative integer argument; exits with 2 otherwise.
int64_t parse_count(const char* flag, const char* text) {
  if (std::string(text) == "0") return 0;
  return trainpack::bench::parse_positive(flag, text);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--pipeline") {
      o.mode = Options::Mode::kPipeline;
    } else if (a == "--train") {
      o.mode = Options::Mode::kTrain;
    } else if (a == "--grey") {
      o.grey = true;
    } else if (a == "--root" && has_value) {
      o.root = argv[++i];
    } else if (a == "--source" && has_value) {
      o.source = argv[++i];
    } else if ((a == "--lr" || a == "--weight-decay") && has_value) {
      const double v = std::atof(argv[++i]);
      (a == "--lr" ? o.lr : o.weight_decay) = v;
    } else if ((a == "--threads" || a == "--decode-threads" || a == "--warmup") && has_value) {
      const int64_t v = parse_count(a.c_str(), argv[++i]);
      if (a == "--threads") o.threads = v;
      if (a == "--decode-threads") o.decode_threads = v;
      if (a == "--warmup") o.warmup = v;
    } else if ((a == "--batch" || a == "--size" || a == "--crop" || a == "--passes" ||
                a == "--buffer" || a == "--steps") &&
               has_value) {
      const int64_t v = trainpack::bench::parse_positive(a.c_str(), argv[++i]);
      if (a == "--batch") o.batch = v;
      if (a == "--size") o.size = v;
      if (a == "--crop") o.crop = v;
      if (a == "--passes") o.passes = v;
      if (a == "--buffer") o.buffer = v;
      if (a == "--steps") o.steps = v;
    } else if (a == "--help" || a == "-h") {
      usage(stdout, argv[0]);
      std::exit(0);
    } else {
      usage(stderr, argv[0]);
      std::exit(2);
    }
  }
  const auto fail = [&](const char* why) {
    std::fprintf(stderr, "trainpack_bench_input: %s\n", why);
    usage(stderr, argv[0]);
    std::exit(2);
  };
  if (o.mode == Options::Mode::kNone) fail("--pipeline or --train is required");
  if (o.mode == Options::Mode::kPipeline) {
    if (o.root.empty()) fail("--pipeline needs --root DIR");
    if (o.crop > o.size) fail("--crop is larger than --size");
    if (o.batch == 0) o.batch = 64;
  } else {
    if (o.source != "idx" && o.source != "png") fail("--train needs --source idx or png");
    if (o.source == "png" && o.root.empty()) fail("--source png needs --root DIR");
    if (o.threads == 0) fail("--train needs --threads >= 1");
    if (o.root.empty()) o.root = trainpack::kFashionMnistDir;
    if (o.batch == 0) o.batch = 128;
  }
  return o;
}

// --pipeline: the images per second of BatchData over ImageFolder, iterated on this thread.
int run_pipeline(const Options& o) {
  at::set_num_threads(1);
  const int64_t channels = o.grey ? 1 : 3;
  const std::vector<double> mean(static_cast<size_t>(channels), 0.5);
  const std::vector<double> stddev(static_cast<size_t>(channels), 0.25);
  auto folder = std::make_shared<trainpack::ImageFolder>(
      o.root, trainpack::ImageFolderOptions()
                  .shuffle(true)
                  .seed(1)
                  .decode(trainpack::ImageDecodeOptions().channels(
                      o.grey ? trainpack::ImageChannels::kGrey : trainpack::ImageChannels::kRGB))
                  .augmentors({std::make_shared<trainpack::ResizeShortestEdge>(o.size),
                               std::make_shared<trainpack::RandomCrop>(o.crop, o.crop),
                               std::make_shared<trainpack::Flip>(),
                               std::make_shared<trainpack::Normalize>(mean, stddev)})
                  .num_threads(o.threads)
                  .buffer_size(o.buffer));
  auto batches = std::make_shared<trainpack::BatchData>(folder, o.batch, /*remainder=*/true);
  batches->reset_state();
  std::vector<int64_t> shape;  // of the first batch's images
  // One pass; returns the images it yielded.
  const auto pass = [&] {
    batches->begin_pass();
    int64_t images = 0;
    while (std::optional<trainpack::Datapoint> dp = batches->next()) {
      const at::Tensor& image = (*dp)[0];
      if (shape.empty()) shape = image.sizes().vec();
      images += image.size(0);
    }
    return images;
  };
  pass();  // warm-up
  int64_t images = 0;
  const auto start = Clock::now();
  for (int64_t p = 0; p < o.passes; ++p) images += pass();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::string shape_json;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) shape_json += ", ";
    shape_json += std::to_string(shape[i]);
  }
  std::printf(
      "{\"side\": \"trainpack\", \"threads\": %lld, \"images\": %lld, \"seconds\": %.4f, "
      "\"images_per_s\": %.2f, \"passes\": %lld, \"files\": %lld, \"batch\": %lld, "
      "\"batch_shape\": [%s], \"size\": %lld, \"crop\": %lld, \"grey\": %s}\n",
      static_cast<long long>(o.threads), static_cast<long long>(images), seconds,
      static_cast<double>(images) / seconds, static_cast<long long>(o.passes),
      static_cast<long long>(folder->size().value_or(-1)), static_cast<long long>(o.batch),
      shape_json.c_str(), static_cast<long long>(o.size), static_cast<long long>(o.crop),
      o.grey ? "true" : "false");
  std::fflush(stdout);
  return 0;
}

// steady_clock at before_epoch and at every trigger_step (the end of a step, after every
// callback's after_run).
class StepClock : public trainpack::Callback {
 public:
  explicit StepClock(int64_t steps) { ticks_.reserve(static_cast<size_t>(steps) + 1); }
  const std::vector<Clock::time_point>& ticks() const { return ticks_; }

 protected:
  void _before_epoch() override { ticks_.push_back(Clock::now()); }
  void _trigger_step() override { ticks_.push_back(Clock::now()); }

 private:
  std::vector<Clock::time_point> ticks_;
};

// The training batches of --source.
trainpack::DataFlowPtr training_batches(const Options& o) {
  if (o.source == "idx") {
    return std::make_shared<trainpack::BatchData>(
        std::make_shared<trainpack::FashionMnist>(
            "train", o.root, trainpack::FashionMnistOptions().shuffle(true).seed(1)),
        o.batch);
  }
  auto folder = std::make_shared<trainpack::ImageFolder>(
      o.root, trainpack::ImageFolderOptions()
                  .shuffle(true)
                  .seed(1)
                  .decode(trainpack::ImageDecodeOptions().channels(trainpack::ImageChannels::kGrey))
                  .augmentors({std::make_shared<trainpack::Normalize>(std::vector<double>{0.0},
                                                                      std::vector<double>{1.0})})
                  .num_threads(o.decode_threads));
  auto squeezed = std::make_shared<trainpack::MapData>(
      folder, [](trainpack::Datapoint dp) -> std::optional<trainpack::Datapoint> {
        dp[0] = dp[0].squeeze(0);  // [1, 28, 28] -> [28, 28]
        return dp;
      });
  return std::make_shared<trainpack::BatchData>(squeezed, o.batch);
}

// --train: the steps per second of SimpleTrainer fed from --source.
int run_train(const Options& o) {
  torch::manual_seed(1);
  trainpack::bench::ScratchLoggerDir dir("trainpack_bench_input");
  auto model = std::make_shared<fashion_mnist::Model>(o.lr, o.weight_decay);
  const int64_t total = o.warmup + o.steps;
  auto clock = std::make_shared<StepClock>(total);
  const trainpack::TrainConfig config =
      trainpack::TrainConfig()
          .model(model)
          .data(std::make_shared<trainpack::QueueInput>(training_batches(o)))
          .callbacks({clock})
          .steps_per_epoch(total)
          .max_epoch(1);
  trainpack::SimpleTrainer trainer;
  trainpack::launch_train_with_config(config, trainer);
  if (trainer.received_signal() != 0) {
    return trainpack::exit_code_for_signal(trainer.received_signal());
  }
  const std::vector<Clock::time_point>& ticks = clock->ticks();
  if (ticks.size() != static_cast<size_t>(total) + 1) {
    std::fprintf(stderr, "trainpack_bench_input: %zu steps timed, %lld expected\n",
                 ticks.size() - 1, static_cast<long long>(total));
    return 1;
  }
  std::vector<double> step_ms;
  for (size_t i = static_cast<size_t>(o.warmup) + 1; i < ticks.size(); ++i) {
    step_ms.push_back(std::chrono::duration<double, std::milli>(ticks[i] - ticks[i - 1]).count());
  }
  const double seconds =
      std::chrono::duration<double>(ticks.back() - ticks[static_cast<size_t>(o.warmup)]).count();
  const double steps_per_s = static_cast<double>(o.steps) / seconds;
  std::printf(
      "{\"side\": \"trainpack\", \"source\": \"%s\", \"steps\": %lld, \"warmup\": %lld, "
      "\"batch\": %lld, \"threads\": %lld, \"decode_threads\": %lld, \"seconds\": %.4f, "
      "\"steps_per_s\": %.3f, \"images_per_s\": %.1f, \"median_step_ms\": %.3f}\n",
      o.source.c_str(), static_cast<long long>(o.steps), static_cast<long long>(o.warmup),
      static_cast<long long>(o.batch), static_cast<long long>(o.threads),
      static_cast<long long>(o.source == "png" ? o.decode_threads : 0), seconds, steps_per_s,
      steps_per_s * static_cast<double>(o.batch), trainpack::bench::median(step_ms));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    // As a training program would start (the examples do): the pipeline with one intra-op
    // thread, training with --threads; malloc's thresholds tuned in both.
    trainpack::configure_runtime(
        argc, argv,
        trainpack::RuntimeOptions()
            .intra_op_threads(o.mode == Options::Mode::kPipeline ? 1 : static_cast<int>(o.threads))
            .blas_threads(1)
            .tune_malloc(true)
            .log(false));
    if (o.mode == Options::Mode::kPipeline) return run_pipeline(o);
    trainpack::logger::set_level(trainpack::logger::Level::kWarning);
    return run_train(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainpack_bench_input: %s\n", e.what());
    return 1;
  }
}
