#include "trainpack/train/precision.h"

#include "trainpack/detail/torch_compat.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace trainpack {

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFloat32:
      return "float32";
    case Precision::kBFloat16:
      return "bfloat16";
    case Precision::kFloat16:
      return "float16";
  }
  return "unknown";
}

Precision parse_precision(const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "float32" || lower == "fp32" || lower == "32") return Precision::kFloat32;
  if (lower == "bfloat16" || lower == "bf16") return Precision::kBFloat16;
  if (lower == "float16" || lower == "fp16" || lower == "16") return Precision::kFloat16;
  throw std::invalid_argument(fmt::format(
      "unknown precision '{}'; use float32 (fp32), bfloat16 (bf16) or float16 (fp16)", text));
}

std::optional<c10::ScalarType> autocast_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBFloat16:
      return c10::ScalarType::BFloat16;
    case Precision::kFloat16:
      return c10::ScalarType::Half;
    case Precision::kFloat32:
      break;
  }
  return std::nullopt;
}

bool cpu_has_native_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bf16") != 0;
#else
  return false;  // no portable test elsewhere; the log line says "not detected"
#endif
}

void check_precision_supported(Precision precision, const c10::Device& device, const char* who) {
  if (precision == Precision::kFloat32) return;
  if (!device.is_cpu() && !device.is_cuda()) {
    throw std::invalid_argument(fmt::format(
        "{}: {} mixed precision works on CPU and CUDA devices only, not on {}; train in float32 "
        "there",
        who, precision_name(precision), device.str()));
  }
  if (precision == Precision::kFloat16 && device.is_cpu()) {
    throw std::invalid_argument(fmt::format(
        "{}: float16 mixed precision needs a CUDA device (LibTorch's CPU autocast has no float16 "
        "kernels); on the CPU use bfloat16 (Precision::kBFloat16, --precision bf16)",
        who));
  }
}

std::string describe_precision(Precision precision, const c10::Device& device) {
  if (precision == Precision::kFloat32) return "float32 (no autocast)";
  std::string text = fmt::format("{} (autocast on {}", precision_name(precision),
                                 device.is_cuda() ? "cuda" : "cpu");
  if (precision == Precision::kFloat16) text += "; dynamic loss scaling";
  if (device.is_cpu()) {
    text += cpu_has_native_bf16()
                ? "; the CPU has native bfloat16: AVX512_BF16"
                : "; native bfloat16 not detected on this CPU (no AVX512_BF16): expect it to be "
                  "slower than float32";
  }
  return text + ")";
}

AutocastGuard::AutocastGuard(c10::DeviceType device_type, std::optional<c10::ScalarType> dtype) {
  if (!dtype) return;
  engaged_ = true;
  // Autocast has one state per device type: CUDA for a CUDA device, CPU otherwise.
  device_type_ =
      device_type == c10::DeviceType::CUDA ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  previous_enabled_ = compat::autocast_enabled(device_type_);
  previous_dtype_ = compat::autocast_dtype(device_type_);
  compat::set_autocast_enabled(device_type_, true);
  compat::set_autocast_dtype(device_type_, *dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!engaged_) return;
  // The cache holds the low-precision copies of the weights made inside the region; it must not
  // outlive the outermost region, or the next step would use last step's weights.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast_enabled(device_type_, previous_enabled_);
  compat::set_autocast_dtype(device_type_, previous_dtype_);
}

}  // namespace trainpack
