// Mixed precision: which dtype the tower's matrix products and convolutions run in, and the
// autocast guard that makes them do so (Python's `torch.autocast`, over the same ATen switches).
// docs/mixed-precision.md shows it in use (TowerTrainer::set_precision, TrainConfig::precision).
//
// Precision::kFloat32   everything in float32 (the default; no guard, nothing changes)
// Precision::kBFloat16  the tower runs under autocast to bfloat16, on the CPU or a CUDA GPU; the
//                       parameters, their gradients, the optimizer state and the ops autocast
//                       keeps in float32 (losses, softmax, reductions) stay float32
// Precision::kFloat16   the tower runs under autocast to float16 on a CUDA GPU, and the cost is
//                       multiplied by a dynamic loss scale before backward (train/loss_scaler.h)
//
// The backward pass runs outside the guard, as PyTorch recommends: autograd runs each op's
// backward in the dtype its forward used.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

namespace trainpack {

enum class Precision { kFloat32, kBFloat16, kFloat16 };

// "float32", "bfloat16", "float16".
const char* precision_name(Precision precision);

// Parses a precision as users write it: "float32"/"fp32"/"32", "bfloat16"/"bf16",
// "float16"/"fp16"/"16" (case-insensitive). Anything else is std::invalid_argument naming the
// text and listing the accepted spellings.
Precision parse_precision(const std::string& text);

// The dtype autocast casts to: nullopt for float32.
std::optional<c10::ScalarType> autocast_dtype(Precision precision);

// Whether this CPU has bfloat16 instructions (x86's AVX512_BF16; AMX implies it). Without them
// bfloat16 still works on the CPU, through slower conversions: usually slower than float32.
bool cpu_has_native_bf16();

// Throws std::invalid_argument, naming `who`, when `device` cannot train in `precision`:
// float16 on a CPU (CPU autocast has no float16 kernels in LibTorch; use bfloat16 there), or a
// device type autocast does not cover (only CPU and CUDA are). float32 is accepted everywhere.
void check_precision_supported(Precision precision, const c10::Device& device, const char* who);

// One line for the log at the start of training: the precision, what runs in it, and the
// device's support, e.g. "bfloat16 (autocast on cpu; the CPU has native bfloat16: AVX512_BF16)".
std::string describe_precision(Precision precision, const c10::Device& device);

// Python's `with torch.autocast(device_type, dtype):` as an RAII guard: enables autocast to
// `dtype` for `device_type` (CPU or CUDA) on this thread, and on destruction restores the previous
// state (enabled flag and dtype), clearing autocast's cache of cast weights when the outermost
// guard ends, as torch.autocast's __exit__ does. Nested guards are fine. A disengaged guard
// (dtype nullopt, i.e. float32) does nothing at all.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, std::optional<c10::ScalarType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool engaged_ = false;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
};

}  // namespace trainpack
