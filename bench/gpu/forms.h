// The C++ forms of trainpack_bench_gpu (main.cpp describes the benchmark): the bare LibTorch
// loop and SimpleTrainer with the main job's per-step callbacks, eager or as a CUDA graph. Each
// call trains a fresh model (same seed, so the same initial weights) for `warmup` + `steps` steps
// on the same batches and returns the time per step of the last `steps`.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "trainpack/input/dataflow.h"

namespace trainpack::bench_gpu {

struct Setup {
  c10::Device device = c10::Device(c10::kCPU);
  int64_t steps = 600;
  int64_t warmup = 100;
  int64_t batch_size = 128;
  uint64_t seed = 42;              // of the initial weights (the batches have their own)
  double lr = 0.01;                // SGD, Nesterov momentum 0.9 (fashion_mnist::Model)
  double weight_decay = 1e-4;      // the main job's
  std::vector<Datapoint> batches;  // {images [B, 28, 28] float, labels [B] int64}, on `device`
};

// One timed run of a form.
struct Measured {
  double ms_per_step = 0;
  double final_loss = 0;  // the last step's cost (trainpack: its moving average), read afterwards
  std::string fields;     // more ` key=value` fields for the result line (may be empty)
};

// Waits for the device's queued work (torch::cuda::synchronize on CUDA; nothing on the CPU).
void synchronize(c10::Device device);

// Forward, cross-entropy, zero_grad, backward, step: the loop a user writes by hand. No sync
// inside the timed window except at its two ends.
Measured run_bare_cpp(const Setup& setup);

// SimpleTrainer through launch_train_with_config, with the callbacks of the main job that run
// during an epoch (see main.cpp); `cuda_graph`: TrainConfig::cuda_graph with the default options.
Measured run_trainpack(const Setup& setup, bool cuda_graph);

}  // namespace trainpack::bench_gpu
