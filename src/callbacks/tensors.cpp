#include "trainpack/callbacks/tensors.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "trainpack/core/graph.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/file_names.h"
#include "trainpack/utils/host_read.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/npz.h"
#include "trainpack/utils/output_dir.h"
#include "trainpack/utils/png.h"

namespace trainpack {

namespace {

std::string shape_of(const at::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes().begin(), t.sizes().end(), ", "));
}

// `dir` when given, else the logger directory; `cls` names the class in the error.
std::string resolve_dir(const std::optional<std::string>& dir, const char* cls,
                        const char* options) {
  if (dir && dir->empty()) {
    throw std::invalid_argument(fmt::format("{}: {}().dir is empty", cls, options));
  }
  return resolve_output_dir(dir, cls, fmt::format("{}().dir(dir)", options));
}

void create_dir(const std::string& dir, const char* cls) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw std::runtime_error(
        fmt::format("{}: cannot create the directory '{}': {}", cls, dir, ec.message()));
  }
}

// ---- format_tensor_value ----

// Entries shown at each end of a dimension when a tensor is summarized (numpy's edgeitems), and
// the size above which it is (numpy's threshold).
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kThreshold = 1000;

enum class Kind { kFloat, kInt, kBool };

void append_scalar(std::string& out, const at::Tensor& flat, int64_t i, Kind kind) {
  switch (kind) {
    case Kind::kFloat:
      fmt::format_to(std::back_inserter(out), "{:.6g}", flat.data_ptr<double>()[i]);
      break;
    case Kind::kInt:
      fmt::format_to(std::back_inserter(out), "{}", flat.data_ptr<int64_t>()[i]);
      break;
    case Kind::kBool:
      out += flat.data_ptr<bool>()[i] ? "True" : "False";
      break;
  }
}

// Appends dimension `d` of the contiguous tensor `flat` (sizes `sizes`) starting at `offset`.
void append_dim(std::string& out, const at::Tensor& flat, at::IntArrayRef sizes, size_t d,
                int64_t offset, Kind kind, bool summarize) {
  int64_t stride = 1;
  for (size_t k = d + 1; k < sizes.size(); ++k) stride *= sizes[k];
  const int64_t n = sizes[d];
  out += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      out += "..., ";
      i = n - kEdgeItems;
    }
    if (d + 1 == sizes.size()) {
      append_scalar(out, flat, offset + i, kind);
    } else {
      append_dim(out, flat, sizes, d + 1, offset + i * stride, kind, summarize);
    }
    if (i + 1 < n) out += ", ";
  }
  out += ']';
}

// ---- npz keys, checked at construction with write_npz's rules ----

void check_npz_key(const std::string& name) {
  const auto bad = [&](const char* why) {
    std::string shown;  // what() stops at a NUL: show it as \0
    for (char c : name) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
    throw std::invalid_argument(
        fmt::format("DumpTensors: name '{}' cannot be a key of an npz file: {}", shown, why));
  };
  if (name.find('\0') != std::string::npos) bad("it contains a NUL byte");
  if (name[0] == '/' || name[0] == '\\') bad("it starts with a path separator");
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find_first_of("/\\", start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0) bad("it has a '..' component");
    start = end + 1;
  }
}

// ---- CheckNumerics ----

// `kind` is "trainable variable" or "step tensor".
void check_finite(const at::Tensor& t, const std::string& name, const char* kind,
                  int64_t global_step) {
  if (!t.defined() || host_scalar<bool>(at::isfinite(t).all())) return;
  const int64_t nans = host_scalar<int64_t>(at::isnan(t).sum());
  const int64_t infs = host_scalar<int64_t>(at::isinf(t).sum());
  throw std::runtime_error(fmt::format(
      "CheckNumerics['{}']: Tensor had {} values ({} NaN, {} Inf of {} values) in {} '{}' at "
      "global_step {}",
      name, nans > 0 ? "NaN" : "Inf", nans, infs, t.numel(), kind, name, global_step));
}

}  // namespace

std::string format_tensor_value(const at::Tensor& tensor) {
  if (!tensor.defined()) return "<undefined>";
  const at::ScalarType type = tensor.scalar_type();
  Kind kind;
  at::Tensor t = tensor.detach();
  if (type == at::kBool) {
    kind = Kind::kBool;
  } else if (at::isIntegralType(type, /*includeBool=*/false)) {
    kind = Kind::kInt;
    t = t.to(at::kLong);
  } else if (at::isFloatingType(type)) {
    kind = Kind::kFloat;
    t = t.to(at::kDouble);
  } else {
    return fmt::format("<tensor of dtype {} and shape {}>", c10::toString(type), shape_of(tensor));
  }
  t = to_host(t);
  std::string out;
  if (t.dim() == 0) {
    append_scalar(out, t, 0, kind);
  } else {
    append_dim(out, t, t.sizes(), 0, 0, kind, t.numel() > kThreshold);
  }
  return out;
}

// ---- ProcessTensors ----

ProcessTensors::ProcessTensors(std::vector<std::string> names, const char* class_name) {
  if (names.empty()) {
    throw std::invalid_argument(fmt::format(
        "{}: names is empty; give the names of tensors the step publishes", class_name));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) {
      throw std::invalid_argument(fmt::format("{}: names[{}] is empty", class_name, i));
    }
  }
  values_.resize(names.size());
  args_ = RunArgs(std::move(names));
}

ProcessTensors::ProcessTensors(std::vector<std::string> names, Fn fn)
    : ProcessTensors(std::move(names), "ProcessTensors") {
  if (!fn) throw std::invalid_argument("ProcessTensors: fn is empty; pass a callable");
  fn_ = std::move(fn);
}

void ProcessTensors::process(const std::vector<at::Tensor>& values) { fn_(values); }

RunArgs ProcessTensors::_before_run(const StepContext& /*ctx*/) { return RunArgs::ref(args_); }

void ProcessTensors::_after_run(const StepContext& /*ctx*/, const RunValues& values) {
  for (size_t i = 0; i < values_.size(); ++i) values_[i] = values[i];
  try {
    process(values_);
  } catch (...) {
    for (auto& v : values_) v.reset();
    throw;
  }
  for (auto& v : values_) v.reset();  // keep no tensor of the step alive
}

// ---- TensorPrinter ----

TensorPrinter::TensorPrinter(std::vector<std::string> names)
    : ProcessTensors(std::move(names), "TensorPrinter") {}

void TensorPrinter::process(const std::vector<at::Tensor>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    TP_LOG_INFO("{}: {}", names()[i], format_tensor_value(values[i]));
  }
}

// ---- DumpTensors ----

DumpTensors::DumpTensors(std::vector<std::string> names, DumpTensorsOptions options)
    : ProcessTensors(std::move(names), "DumpTensors") {
  std::set<std::string> seen;
  for (const std::string& name : this->names()) {
    check_npz_key(name);
    if (!seen.insert(name).second) {
      throw std::invalid_argument(fmt::format(
          "DumpTensors: name '{}' is given twice; an npz file holds each key once", name));
    }
    arrays_.emplace_back(name, at::Tensor());
  }
  dir_ = resolve_dir(options.dir(), "DumpTensors", "DumpTensorsOptions");
}

void DumpTensors::_before_train() { create_dir(dir_, "DumpTensors"); }

void DumpTensors::process(const std::vector<at::Tensor>& values) {
  for (size_t i = 0; i < values.size(); ++i) arrays_[i].second = values[i].detach();
  const std::string path =
      (std::filesystem::path(dir_) / fmt::format("DumpTensor-{}.npz", global_step())).string();
  try {
    write_npz(path, arrays_);
  } catch (...) {
    for (auto& a : arrays_) a.second.reset();
    throw;
  }
  for (auto& a : arrays_) a.second.reset();
}

// ---- DumpTensorAsImage ----

DumpTensorAsImage::DumpTensorAsImage(std::string tensor_name, DumpTensorAsImageOptions options)
    : tensor_name_(std::move(tensor_name)), options_(std::move(options)) {
  if (tensor_name_.empty()) {
    throw std::invalid_argument("DumpTensorAsImage: tensor_name is empty");
  }
  prefix_ = options_.prefix() ? *options_.prefix() : tensor_name_;
  if (prefix_.empty()) {
    throw std::invalid_argument(
        "DumpTensorAsImage: DumpTensorAsImageOptions().prefix is empty; leave it unset to use the "
        "tensor name");
  }
  if (prefix_.find('\0') != std::string::npos) {
    throw std::invalid_argument("DumpTensorAsImage: the prefix contains a NUL byte");
  }
  if (!std::isfinite(options_.scale())) {
    throw std::invalid_argument(
        fmt::format("DumpTensorAsImage: DumpTensorAsImageOptions().scale must be finite, got {}",
                    options_.scale()));
  }
  // The prefix is a monitor tag too ("conv/W"); only its file name follows the file name rule.
  file_prefix_ = safe_file_name_component(prefix_);
  dir_ = resolve_dir(options_.dir(), "DumpTensorAsImage", "DumpTensorAsImageOptions");
  set_chief_only(true);
}

void DumpTensorAsImage::_before_train() {
  create_dir(dir_, "DumpTensorAsImage");
  source_ = Source::kStep;
  for (const auto& [name, tensor] : graph().trainable_variables()) {
    if (name == tensor_name_) {
      source_ = Source::kVariable;
      variable_ = tensor;
      break;
    }
  }
  if (source_ == Source::kStep) fetch_ = RunArgs({tensor_name_});
}

RunArgs DumpTensorAsImage::_before_run(const StepContext& /*ctx*/) {
  if (source_ != Source::kStep || local_step() != trainer().steps_per_epoch() - 1) {
    return RunArgs();
  }
  return RunArgs::ref(fetch_);
}

void DumpTensorAsImage::_after_run(const StepContext& /*ctx*/, const RunValues& values) {
  if (values.empty()) return;
  fetched_ = values[0].detach();
  fetched_at_ = global_step();
}

void DumpTensorAsImage::_trigger() {
  at::Tensor value;
  if (source_ == Source::kVariable) {
    value = variable_.detach();
  } else {
    if (!fetched_.defined() || fetched_at_ != global_step()) {
      throw std::logic_error(fmt::format(
          "DumpTensorAsImage('{}'): trigger() ran at global_step {} with no value of '{}' from "
          "that step; '{}' is not a trainable variable of the graph, so it is fetched from the "
          "last step of "
          "each epoch only: run this callback at epoch ends (e.g. "
          "PeriodicTrigger(...every_k_epochs(k)), not every_k_steps or before_train)",
          tensor_name_, global_step(), tensor_name_, tensor_name_));
    }
    value = fetched_;
  }
  if (options_.map_func()) value = options_.map_func()(value);
  if (!value.defined()) {
    throw std::invalid_argument(fmt::format(
        "DumpTensorAsImage('{}'): map_func returned an undefined tensor", tensor_name_));
  }
  if (c10::isComplexType(value.scalar_type())) {
    throw std::invalid_argument(
        fmt::format("DumpTensorAsImage('{}'): a complex tensor is not an image", tensor_name_));
  }

  // Any shape rule below gives NHWC.
  at::Tensor nhwc;
  const auto is_channels = [](int64_t c) { return c == 1 || c == 3 || c == 4; };
  switch (value.dim()) {
    case 2:
      nhwc = value.unsqueeze(0).unsqueeze(3);
      break;
    case 3:
      nhwc = is_channels(value.size(2)) ? value.unsqueeze(0) : value.unsqueeze(3);
      break;
    case 4:
      if (is_channels(value.size(3))) nhwc = value;
      break;
    default:
      break;
  }
  if (!nhwc.defined() || nhwc.numel() == 0) {
    throw std::invalid_argument(fmt::format(
        "DumpTensorAsImage('{}'): a value of shape {} is not an image (after map_func); expected "
        "[H, W], [H, W, C] with C in 1, 3, 4, [N, H, W] or [N, H, W, C] with C in 1, 3, 4, none "
        "of them 0",
        tensor_name_, shape_of(value)));
  }
  at::Tensor pixels = nhwc.to(at::kDouble) * options_.scale();
  pixels = at::nan_to_num(pixels, 0.0, 255.0, 0.0).clamp(0.0, 255.0).to(at::kByte);
  pixels = to_host(pixels);

  const int64_t n = pixels.size(0), h = pixels.size(1), w = pixels.size(2), c = pixels.size(3);
  for (int64_t k = 0; k < n; ++k) {
    const std::string png = encode_png(pixels[k].data_ptr<uint8_t>(), h, w, c);
    const std::string path = (std::filesystem::path(dir_) /
                              fmt::format("{}-ep{:03d}-{}.png", file_prefix_, epoch_num(), k))
                                 .string();
    // A temporary file and a rename, as for every file in the log directory: a file or symlink
    // under the name is replaced, never written through. Not fsynced (a picture, not state).
    try {
      write_file_atomically(path, png, /*durable=*/false);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("DumpTensorAsImage: {}", e.what()));
    }
  }
  trainer().monitors().put_image(prefix_, pixels);
}

// ---- CheckNumerics ----

CheckNumerics::CheckNumerics(CheckNumericsOptions options) : options_(std::move(options)) {
  for (size_t i = 0; i < options_.names().size(); ++i) {
    if (options_.names()[i].empty()) {
      throw std::invalid_argument(fmt::format("CheckNumerics: names[{}] is empty", i));
    }
  }
  if (!options_.names().empty() && !options_.run_step()) {
    throw std::invalid_argument(
        "CheckNumerics: names are tensors of the step, checked after every step; set "
        "CheckNumericsOptions().run_step(true)");
  }
  fetch_ = RunArgs(options_.names());
  set_chief_only(true);
}

bool CheckNumerics::overrides(Hook hook) const {
  if (hook == Hook::kBeforeRun) return options_.run_step() && !options_.names().empty();
  if (hook == Hook::kAfterRun) return options_.run_step();
  return Callback::overrides(hook);
}

void CheckNumerics::check_variables() const {
  for (const auto& [name, tensor] : graph().trainable_variables()) {
    check_finite(tensor, name, "trainable variable", global_step());
  }
}

void CheckNumerics::_before_train() {
  if (graph().trainable_variables().empty() && options_.names().empty()) {
    TP_LOG_WARN("CheckNumerics: the graph has no trainable variables; there is nothing to check.");
  }
  check_variables();
}

RunArgs CheckNumerics::_before_run(const StepContext& /*ctx*/) { return RunArgs::ref(fetch_); }

void CheckNumerics::_after_run(const StepContext& /*ctx*/, const RunValues& values) {
  check_variables();
  for (size_t i = 0; i < values.size(); ++i) {
    check_finite(values[i], values.name(i), "step tensor", global_step());
  }
}

void CheckNumerics::_trigger() {
  if (options_.run_as_trigger()) check_variables();
}

}  // namespace trainpack
