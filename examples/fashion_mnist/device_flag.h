// The main job's --device: "cpu", "cuda" (cuda:<local rank> under torchrun) or "cuda:N".
#pragma once

#include <c10/core/Device.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace fashion_mnist {

// What is wrong with `text` as a --device value, or "" when it names the CPU or a CUDA device.
inline std::string device_flag_error(const std::string& text) {
  try {
    const c10::Device device(text);
    if (device.is_cpu() || device.is_cuda()) return "";
  } catch (const std::exception&) {
  }
  return fmt::format("must be cpu, cuda or cuda:N (N: a GPU index), got '{}'", text);
}

// The training device of this process: `text` (checked by device_flag_error) with "cuda" made
// cuda:<local_rank>, one GPU per process as torchrun starts them. Throws std::invalid_argument
// when no GPU is visible (a CPU-only LibTorch, no driver, CUDA_VISIBLE_DEVICES empty) or the
// index is past the GPUs there are, saying what to do.
inline c10::Device training_device(const std::string& text, int64_t local_rank) {
  c10::Device device(text);
  if (device.is_cpu()) return device;
  if (!torch::cuda::is_available()) {
    throw std::invalid_argument(fmt::format(
        "--device {}: no CUDA GPU is available to this process (torch::cuda::is_available() is "
        "false: a CPU-only LibTorch, no NVIDIA driver, or CUDA_VISIBLE_DEVICES hides every GPU); "
        "use --device cpu, or run on a machine with a GPU and a CUDA LibTorch",
        text));
  }
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  const int64_t index = device.has_index() ? device.index() : local_rank;
  if (index >= count) {
    throw std::invalid_argument(fmt::format(
        "--device {}: this process would train on cuda:{}, but {} GPU(s) are visible (cuda:0 to "
        "cuda:{}); under torchrun give --nproc_per_node at most the number of GPUs",
        text, index, count, count - 1));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace fashion_mnist
