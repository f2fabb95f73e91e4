#include "trainpack/core/monitor_base.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <regex>
#include <stdexcept>

#include "trainpack/core/trainer.h"
#include "trainpack/utils/host_read.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/png.h"

namespace trainpack {

namespace {

// put_image's shape rules (tensorpack's image_to_nhwc). `who` starts the error message.
at::Tensor to_nhwc(const std::string& who, const at::Tensor& image) {
  switch (image.dim()) {
    case 4:
      return image;
    case 3: {
      const int64_t c = image.size(2);
      return (c == 1 || c == 3 || c == 4) ? image.unsqueeze(0) : image.unsqueeze(3);
    }
    case 2:
      return image.unsqueeze(0).unsqueeze(3);
    default:
      throw std::invalid_argument(
          fmt::format("{}: array of shape [{}] is not an image", who,
                      fmt::join(image.sizes().begin(), image.sizes().end(), ", ")));
  }
}

// numpy's astype('uint8'): no clipping. Floats go through int64 so that out-of-range values
// wrap modulo 256 (a direct float -> uint8 conversion is undefined out of range).
at::Tensor to_uint8(const std::string& who, const at::Tensor& image) {
  if (c10::isComplexType(image.scalar_type())) {
    throw std::invalid_argument(fmt::format("{}: a complex tensor is not an image", who));
  }
  at::Tensor t = image;
  if (c10::isFloatingType(t.scalar_type())) t = t.to(at::kLong);
  return to_host(t.to(at::kByte));  // the pixels of an image put or summarised
}

}  // namespace

namespace detail {
at::Tensor image_to_nhwc_uint8(const std::string& who, const at::Tensor& image) {
  if (!image.defined())
    throw std::invalid_argument(fmt::format("{}: the tensor is undefined", who));
  return to_uint8(who, to_nhwc(who, image.detach()));
}

bool encode_image_value(const char* who, const at::Tensor& nhwc_uint8, int64_t k, std::string tag,
                        SummaryValue* out) {
  const int64_t h = nhwc_uint8.size(1), w = nhwc_uint8.size(2), c = nhwc_uint8.size(3);
  out->tag = std::move(tag);
  out->kind = SummaryValue::Kind::kImage;
  try {
    out->image.encoded_png = encode_png(nhwc_uint8[k].data_ptr<uint8_t>(), h, w, c);
  } catch (const std::exception& e) {
    TP_LOG_WARN("{}: image '{}' of shape [{}, {}, {}] was not encoded ({}); skipped.", who,
                out->tag, h, w, c, e.what());
    return false;
  }
  out->image.height = h;
  out->image.width = w;
  out->image.colorspace = c;
  return true;
}

std::string normalize_summary_tag(const std::string& tag) {
  static const std::regex kTower("tower[0-9]+/");
  static const std::string kSuffix = "-summary";
  std::string out = std::regex_replace(tag, kTower, "");
  if (out.size() >= kSuffix.size() &&
      out.compare(out.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
    out.resize(out.size() - kSuffix.size());
  }
  return out;
}
}  // namespace detail

Monitors::Monitors(std::vector<MonitorPtr> monitors)
    : monitors_(std::move(monitors)), last_recorded_(history_.end()) {
  for (const auto& m : monitors_) {
    if (!m) throw std::invalid_argument("Monitors: a monitor is null");
  }
  set_chief_only(false);
}

void Monitors::record(const std::string& name, double value) {
  // The name put last is usually the one put now (one scalar per step): one string comparison
  // instead of a walk down the map.
  auto it = last_recorded_;
  if (it == history_.end() || it->first != name) {
    it = history_.find(name);
    if (it == history_.end()) it = history_.emplace(name, History()).first;
    last_recorded_ = it;
  }
  it->second.emplace_back(current_step(), value);
}

void Monitors::put_scalar(const std::string& name, double value) {
  for (const auto& m : monitors_) m->process_scalar(name, value);
  record(name, value);
  // The summary of one scalar is a member reused from put to put (its tag keeps its capacity),
  // so that a put allocates nothing; a put from inside a monitor's process_summary (the member
  // is in use) builds its own.
  if (scalar_summary_busy_) {
    Summary summary;
    summary.values.push_back(SummaryValue::make_scalar(name, value));
    for (const auto& m : monitors_) m->process_summary(summary);
    return;
  }
  if (scalar_summary_.values.empty()) scalar_summary_.values.emplace_back();
  SummaryValue& v = scalar_summary_.values.front();
  v.tag = name;
  v.scalar = value;
  scalar_summary_busy_ = true;
  try {
    for (const auto& m : monitors_) m->process_summary(scalar_summary_);
  } catch (...) {
    scalar_summary_busy_ = false;
    throw;
  }
  scalar_summary_busy_ = false;
}

void Monitors::put_image(const std::string& name, const at::Tensor& image) {
  const at::Tensor nhwc =
      detail::image_to_nhwc_uint8(fmt::format("Monitors::put_image('{}')", name), image);
  for (const auto& m : monitors_) m->process_image(name, nhwc);

  const int64_t n = nhwc.size(0);
  Summary summary;
  for (int64_t k = 0; k < n; ++k) {
    SummaryValue value;
    if (detail::encode_image_value("Monitors::put_image", nhwc, k,
                                   n == 1 ? name : fmt::format("{}/{}", name, k), &value)) {
      summary.values.push_back(std::move(value));
    }
  }
  for (const auto& m : monitors_) m->process_summary(summary);
}

void Monitors::put_summary(Summary summary) {
  for (SummaryValue& v : summary.values) {
    if (v.kind != SummaryValue::Kind::kScalar) continue;
    v.tag = detail::normalize_summary_tag(v.tag);
    for (const auto& m : monitors_) m->process_scalar(v.tag, v.scalar);
    record(v.tag, v.scalar);
  }
  for (const auto& m : monitors_) m->process_summary(summary);
}

void Monitors::put_event(Event event) {
  event.step = current_step();
  const std::chrono::duration<double> now = std::chrono::system_clock::now().time_since_epoch();
  event.wall_time = now.count();
  for (const auto& m : monitors_) m->process_event(event);
}

const Monitors::History& Monitors::get_history(const std::string& name) const {
  static const History kEmpty;
  auto it = history_.find(name);
  return it == history_.end() ? kEmpty : it->second;
}

double Monitors::get_latest(const std::string& name) const {
  const History& h = get_history(name);
  if (h.empty()) {
    const std::vector<std::string> known = names();
    throw std::out_of_range(fmt::format(
        "No available data for the key: {}; the names with data: {}", name,
        known.empty() ? std::string("none yet") : fmt::format("{}", fmt::join(known, ", "))));
  }
  return h.back().second;
}

std::vector<std::string> Monitors::names() const {
  std::vector<std::string> out;
  out.reserve(history_.size());
  for (const auto& entry : history_) out.push_back(entry.first);
  return out;
}

void Monitors::add_validator(const Callback& validator) {
  for (const Validator& v : validators_) {
    if (v.callback == &validator) return;
  }
  validators_.push_back(Validator{&validator, validator.name(), false});
}

void Monitors::validation_done(const Callback& validator) {
  for (Validator& v : validators_) {
    if (v.callback == &validator) {
      v.done = true;
      return;
    }
  }
  throw std::invalid_argument(
      fmt::format("Monitors::validation_done: {} was not added as a validator; call "
                  "trainer().monitors().add_validator(*this) in its setup_graph first",
                  validator.name()));
}

bool Monitors::validators_have_run() const {
  return std::all_of(validators_.begin(), validators_.end(),
                     [](const Validator& v) { return v.done; });
}

std::vector<std::string> Monitors::validator_names() const {
  std::vector<std::string> out;
  for (const Validator& v : validators_) out.push_back(v.name);
  return out;
}

namespace detail {
std::optional<std::string> missing_stat_problem(const Monitors& monitors, const std::string& stat,
                                                int64_t global_step, int64_t epoch) {
  if (!monitors.get_history(stat).empty() || !monitors.validators_have_run()) return std::nullopt;
  const std::vector<std::string> validators = monitors.validator_names();
  const std::vector<std::string> names = monitors.names();
  return fmt::format(
      "'{}' has not been put by global_step={} (epoch {}), {}. The stats put so far: {}.", stat,
      global_step, epoch,
      validators.empty()
          ? std::string("and no callback validates (none called Monitors::add_validator, as "
                        "InferenceRunner does) to put it later")
          : fmt::format("though every validation has run ({})", fmt::join(validators, ", ")),
      names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
}
}  // namespace detail

}  // namespace trainpack
