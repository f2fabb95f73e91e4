// image_folder: a small CNN trained on the images of a folder laid out as root/<class>/<image>
// (PNG or JPEG), decoded and augmented on worker threads while the trainer steps.
//
//   image_folder --train DIR [--val DIR] [--logdir DIR] [--max-epoch 5] [--batch-size 64]
//                [--decode-threads 2] [--size 32] [--crop 28] [--grey] ...
//   image_folder --export-fashion-mnist OUT [--train-limit N] [--val-limit N] [--data DIR]
//
// Training: ImageFolder over --train, shuffled with --seed; every image resized (shorter side to
// --size), randomly cropped to --crop, flipped left-right with probability 0.5 and normalised;
// the validation folder (sharing the training folder's class list) resized, center-cropped and
// normalised. Callbacks: validation every epoch (InferenceRunner: cost, val-error-top1), a
// checkpoint every epoch (and every --checkpoint-every steps when given, and at the step where
// SIGINT/SIGTERM stopped training), the best one by val-error-top1 (MinSaver), the learning rate
// divided by 10 after 60% of the epochs, the time left. The run found in --logdir is resumed from
// its latest checkpoint at the exact image where it stopped (--no-resume starts over).
//
// --export-fashion-mnist writes Fashion-MNIST from Debian's dataset-fashion-mnist as an image
// folder, OUT/train/<class>/<index>.png and OUT/val/<class>/<index>.png (grey PNGs), for trying
// this program, its tests and the benchmarks on the same data as the main job.
//
// Exit status: 0 trained to the end; 1 failed (the reason is logged); 2 bad flags or data;
// 128 + N stopped by signal N after saving a checkpoint.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model.h"
#include "trainpack/input/fashion_mnist.h"
#include "trainpack/input/image_folder.h"
#include "trainpack/trainpack.h"
#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/png.h"

namespace {

namespace fs = std::filesystem;

// Fashion-MNIST's class names, as folder names (label order).
const std::vector<std::string> kFashionMnistClasses = {
    "0-t-shirt", "1-trouser", "2-pullover", "3-dress", "4-coat",
    "5-sandal",  "6-shirt",   "7-sneaker",  "8-bag",   "9-ankle-boot"};

// Writes the first `limit` images of `split` (all when 0) as grey PNGs under out/<class>/.
int64_t export_split(const std::string& split, const std::string& data_dir, int64_t limit,
                     const fs::path& out) {
  auto [images, labels] = trainpack::FashionMnist::read(split, data_dir);
  const int64_t n = limit > 0 ? std::min(limit, images.size(0)) : images.size(0);
  const at::Tensor bytes = images.slice(0, 0, n).mul(255).round().to(at::kByte).contiguous();
  for (const std::string& name : kFashionMnistClasses) fs::create_directories(out / name);
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor image = bytes[i];
    const std::string png = trainpack::encode_png(image.data_ptr<uint8_t>(), 28, 28, 1);
    const auto label = static_cast<size_t>(labels[i].item<int64_t>());
    trainpack::write_file_atomically(
        (out / kFashionMnistClasses[label] / fmt::format("{:05d}.png", i)).string(), png);
  }
  return n;
}

// (0, lr), lr/10 from 60% of the epochs on (where that is after epoch 0).
trainpack::ScheduledHyperParamSetter::Schedule lr_schedule(double lr, int64_t max_epoch) {
  trainpack::ScheduledHyperParamSetter::Schedule schedule{{0, lr}};
  if (max_epoch * 6 / 10 > 0) schedule.push_back({max_epoch * 6 / 10, lr / 10});
  return schedule;
}

int run_main(int argc, char** argv) {
  CLI::App app{"Trains a small CNN on an image folder (root/<class>/<image>)"};
  std::string train_dir, val_dir, logdir = "train_log/image_folder", export_dir;
  std::string data_dir = trainpack::kFashionMnistDir;
  int64_t max_epoch = 5, steps_per_epoch = 0, batch_size = 64, decode_threads = 2, size = 32,
          crop = 28, checkpoint_every = 0, train_limit = 0, val_limit = 0;
  int threads = 0;
  double lr = 0.05;
  uint64_t seed = 1;
  bool grey = false, no_resume = false;
  app.add_option("--train", train_dir, "Training images, root/<class>/<image>");
  app.add_option("--val", val_dir, "Validation images, with the training folder's classes");
  app.add_option("--logdir", logdir, "Log directory (resumed when it holds a run)");
  app.add_option("--max-epoch", max_epoch, "Number of epochs")->check(CLI::Range(1, 1000000));
  app.add_option("--steps-per-epoch", steps_per_epoch, "Steps per epoch; 0: one pass")
      ->check(CLI::Range(0, 1000000000));
  app.add_option("--batch-size", batch_size, "Batch size")->check(CLI::Range(1, 1000000));
  app.add_option("--lr", lr, "Initial learning rate of SGD")->check(CLI::Range(1e-9, 10.0));
  app.add_option("--seed", seed, "Seed of the initialisation, the order and the augmentation");
  app.add_option("--threads", threads, "Intra-op threads; 0: the default")
      ->check(CLI::Range(0, 4096));
  app.add_option("--decode-threads", decode_threads, "Threads that decode and augment images")
      ->check(CLI::Range(0, 4096));
  app.add_option("--size", size, "Shorter side after resizing")->check(CLI::Range(1, 100000));
  app.add_option("--crop", crop, "Side of the square crop")->check(CLI::Range(1, 100000));
  app.add_flag("--grey", grey, "Decode to one grey channel (default: RGB)");
  app.add_option("--checkpoint-every", checkpoint_every,
                 "Also save a checkpoint every N steps; 0: at the end of every epoch only")
      ->check(CLI::Range(0, 1000000000));
  app.add_flag("--no-resume", no_resume, "Start over: move a previous run in --logdir aside");
  app.add_option("--export-fashion-mnist", export_dir,
                 "Write Fashion-MNIST as an image folder (OUT/train, OUT/val) and exit");
  app.add_option("--data", data_dir, "Fashion-MNIST's folder, for --export-fashion-mnist");
  app.add_option("--train-limit", train_limit, "Export only the first N training images")
      ->check(CLI::Range(0, 60000));
  app.add_option("--val-limit", val_limit, "Export only the first N test images")
      ->check(CLI::Range(0, 10000));
  CLI11_PARSE(app, argc, argv);
  if (crop > size) {
    std::fprintf(stderr, "image_folder: error: --crop %lld is larger than --size %lld\n",
                 static_cast<long long>(crop), static_cast<long long>(size));
    return 2;
  }

  if (!export_dir.empty()) {
    try {
      const int64_t n_train =
          export_split("train", data_dir, train_limit, fs::path(export_dir) / "train");
      const int64_t n_val = export_split("test", data_dir, val_limit, fs::path(export_dir) / "val");
      std::printf("image_folder: wrote %lld training and %lld validation images under %s\n",
                  static_cast<long long>(n_train), static_cast<long long>(n_val),
                  export_dir.c_str());
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "image_folder: error: %s\n", e.what());
      return 2;
    }
  }
  if (train_dir.empty()) {
    std::fprintf(stderr, "image_folder: error: --train DIR is required (or --help)\n");
    return 2;
  }

  trainpack::configure_runtime(argc, argv, trainpack::RuntimeOptions().intra_op_threads(threads));
  torch::manual_seed(seed);

  // The folders first: a bad folder fails before the log directory is touched.
  const auto decode = trainpack::ImageDecodeOptions().channels(
      grey ? trainpack::ImageChannels::kGrey : trainpack::ImageChannels::kRGB);
  const int64_t channels = grey ? 1 : 3;
  const std::vector<double> mean(static_cast<size_t>(channels), 0.5);
  const std::vector<double> stddev(static_cast<size_t>(channels), 0.25);
  std::shared_ptr<trainpack::ImageFolder> train, val;
  try {
    train = std::make_shared<trainpack::ImageFolder>(
        train_dir, trainpack::ImageFolderOptions()
                       .shuffle(true)
                       .seed(seed)
                       .decode(decode)
                       .num_threads(decode_threads)
                       .augmentors({std::make_shared<trainpack::ResizeShortestEdge>(size),
                                    std::make_shared<trainpack::RandomCrop>(crop, crop),
                                    std::make_shared<trainpack::Flip>(),
                                    std::make_shared<trainpack::Normalize>(mean, stddev)}));
    if (!val_dir.empty()) {
      val = std::make_shared<trainpack::ImageFolder>(
          val_dir, trainpack::ImageFolderOptions()
                       .classes(train->classes())
                       .decode(decode)
                       .num_threads(decode_threads)
                       .augmentors({std::make_shared<trainpack::ResizeShortestEdge>(size),
                                    std::make_shared<trainpack::CenterCrop>(crop, crop),
                                    std::make_shared<trainpack::Normalize>(mean, stddev)}));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "image_folder: error: %s\n", e.what());
    return 2;
  }
  if (*train->size() < batch_size) {
    std::fprintf(stderr,
                 "image_folder: error: --batch-size %lld is larger than the %lld training images\n",
                 static_cast<long long>(batch_size), static_cast<long long>(*train->size()));
    return 2;
  }

  trainpack::logger::set_logger_dir(logdir, no_resume ? 'b' : 'k');
  TP_LOG_INFO("image_folder: {} classes; training on {}", train->classes().size(),
              train->describe());
  if (val) TP_LOG_INFO("image_folder: validating on {}", val->describe());

  auto model = std::make_shared<image_folder::Model>(
      channels, crop, static_cast<int64_t>(train->classes().size()), lr);
  auto saver = std::make_shared<trainpack::ModelSaver>();
  std::vector<trainpack::CallbackPtr> callbacks;
  if (val) {
    callbacks.push_back(std::make_shared<trainpack::InferenceRunner>(
        std::make_shared<trainpack::BatchData>(val, batch_size, /*remainder=*/true),
        std::vector<trainpack::InferencerPtr>{
            std::make_shared<trainpack::ScalarStats>("cost"),
            std::make_shared<trainpack::ClassificationError>("wrong-top1", "val-error-top1")}));
  }
  if (checkpoint_every > 0) {
    callbacks.push_back(std::make_shared<trainpack::PeriodicTrigger>(
        saver,
        trainpack::PeriodicTriggerOptions().every_k_steps(checkpoint_every).every_k_epochs(1)));
  } else {
    callbacks.push_back(saver);
  }
  if (val) callbacks.push_back(std::make_shared<trainpack::MinSaver>("val-error-top1"));
  callbacks.push_back(std::make_shared<trainpack::ScheduledHyperParamSetter>(
      "learning_rate", lr_schedule(lr, max_epoch)));
  callbacks.push_back(std::make_shared<trainpack::EstimatedTimeLeft>());

  trainpack::TrainConfig config =
      trainpack::TrainConfig()
          .model(model)
          // Batches are made on QueueInput's thread while the step runs (a SimpleTrainer feeds
          // a dataflow given as .dataflow() from its own thread).
          .data(std::make_shared<trainpack::QueueInput>(
              std::make_shared<trainpack::BatchData>(train, batch_size)))
          .callbacks(callbacks)
          .max_epoch(max_epoch);
  if (steps_per_epoch > 0) config.steps_per_epoch(steps_per_epoch);
  if (!no_resume) {
    trainpack::AutoResumeTrainConfig resumed(config);
    if (!resumed.found_checkpoint().empty()) {
      TP_LOG_INFO("image_folder: continuing the run in {} from {}", logdir,
                  resumed.found_checkpoint());
    }
    config = resumed;
  }
  trainpack::SimpleTrainer trainer;
  trainpack::launch_train_with_config(config, trainer);
  if (trainer.received_signal() != 0 && !trainer.finished()) {
    TP_LOG_INFO("image_folder: stopped by {} at global_step {}; the same command resumes there",
                trainpack::stop_signal_name(trainer.received_signal()), trainer.global_step());
    return trainpack::exit_code_for_signal(trainer.received_signal());
  }
  TP_LOG_INFO("image_folder: trained {} epochs", max_epoch);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    trainpack::print_exception(e);
    return 1;
  }
}
