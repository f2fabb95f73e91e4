// RunFlags: the main job's data and optimisation flags, kept in every checkpoint, so that a resume
// with other flags is caught. Where the checkpoint's data position cannot mean the same thing
// (another batch size or another number of training images: "batch 12 of the shuffled pass" then
// names other images) the resume is refused before the first step, with the flags to give; where
// it only stops being exact (steps per epoch, validation images, learning rate, weight decay,
// seed, precision) a warning says so and training goes on.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainpack/trainpack.h"

namespace fashion_mnist {

struct RunFlagValues {
  int64_t train_images = 0;  // after --train-limit
  int64_t batch_size = 0;
  int64_t steps_per_epoch = 0;  // after the default (one pass)
  int64_t val_images = 0;       // after --val-limit
  double lr = 0;
  double weight_decay = 0;
  int64_t seed = 0;       // the bits of the uint64 seed
  std::string precision;  // --precision as given (fp32, bf16, ...)
};

class RunFlags : public trainpack::Callback {
 public:
  explicit RunFlags(RunFlagValues flags) : flags_(flags) {}

  std::string name() const override { return "RunFlags"; }

  trainpack::CallbackState state() const override {
    using trainpack::state_scalar;
    return {{"train_images", state_scalar(flags_.train_images)},
            {"batch_size", state_scalar(flags_.batch_size)},
            {"steps_per_epoch", state_scalar(flags_.steps_per_epoch)},
            {"val_images", state_scalar(flags_.val_images)},
            {"lr", state_scalar(flags_.lr)},
            {"weight_decay", state_scalar(flags_.weight_decay)},
            {"seed", state_scalar(flags_.seed)},
            {"precision", trainpack::state_string(flags_.precision)}};
  }

  void load_state(const trainpack::CallbackState& state) override {
    const auto saved_int = [&](const char* key) {
      return trainpack::state_int(name(), state, key);
    };
    const auto saved_double = [&](const char* key) {
      return trainpack::state_double(name(), state, key);
    };
    std::vector<std::string> impossible;
    if (saved_int("batch_size") != flags_.batch_size) {
      impossible.push_back(fmt::format("--batch-size {} (this run: {})", saved_int("batch_size"),
                                       flags_.batch_size));
    }
    if (saved_int("train_images") != flags_.train_images) {
      impossible.push_back(fmt::format("{} training images, --train-limit (this run: {})",
                                       saved_int("train_images"), flags_.train_images));
    }
    if (!impossible.empty()) {
      throw std::invalid_argument(fmt::format(
          "the checkpoint was saved by a run with {}; its data position (the batch of the "
          "shuffled pass to continue at) means other images with this run's flags, so the "
          "resume cannot be exact. Run with the flags of that run, or pass --no-resume to start "
          "over (the directory is moved aside)",
          fmt::join(impossible, " and ")));
    }
    std::vector<std::string> inexact;
    auto compare_int = [&](const char* key, const char* flag, int64_t now) {
      if (saved_int(key) != now)
        inexact.push_back(fmt::format("{} {} -> {}", flag, saved_int(key), now));
    };
    auto compare_double = [&](const char* key, const char* flag, double now) {
      if (saved_double(key) != now) {
        inexact.push_back(fmt::format("{} {} -> {}", flag, saved_double(key), now));
      }
    };
    compare_int("steps_per_epoch", "--steps-per-epoch", flags_.steps_per_epoch);
    compare_int("val_images", "validation images (--val-limit)", flags_.val_images);
    compare_double("lr", "--lr", flags_.lr);
    compare_double("weight_decay", "--weight-decay", flags_.weight_decay);
    compare_int("seed", "--seed", flags_.seed);
    // Absent from checkpoints of older versions, which trained in float32 only.
    if (trainpack::find_state(state, "precision") != nullptr) {
      const std::string saved = trainpack::state_string(name(), state, "precision");
      if (saved != flags_.precision) {
        inexact.push_back(fmt::format("--precision {} -> {}", saved, flags_.precision));
      }
    }
    if (!inexact.empty()) {
      TP_LOG_WARN(
          "[RunFlags] resuming with other flags than the run that saved the checkpoint: {}. "
          "Training continues, but it is no longer the run that one command would have made "
          "(epoch lengths, the learning-rate schedule, the arithmetic or the validation numbers "
          "differ from the earlier epochs'; the seed does not matter any more: weights and "
          "shuffling continue "
          "from the checkpoint).",
          fmt::join(inexact, ", "));
    }
  }

 private:
  RunFlagValues flags_;
};

}  // namespace fashion_mnist
