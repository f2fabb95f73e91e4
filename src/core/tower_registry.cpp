#include "trainpack/core/tower_registry.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <stdexcept>

#include "trainpack/utils/host_read.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

at::Tensor TowerRegistry::MovingAverage::average() const {
  if (!biased.defined() || updates == 0) return at::Tensor();
  return biased / (1.0 - std::pow(decay, static_cast<double>(updates)));
}

void TowerRegistry::record_summary(std::string_view tag, SummaryKind kind, const at::Tensor& value,
                                   int64_t max_outputs) {
  record_summary(tag, "", kind, value, max_outputs);
}

void TowerRegistry::record_summary(std::string_view name, std::string_view suffix, SummaryKind kind,
                                   const at::Tensor& value, int64_t max_outputs) {
  for (auto& e : summaries_) {
    const std::string_view tag(e.tag);
    if (tag.size() == name.size() + suffix.size() && tag.substr(0, name.size()) == name &&
        tag.substr(name.size()) == suffix) {
      if (e.kind != kind) {
        throw std::invalid_argument(
            fmt::format("TowerContext: summary '{}' was recorded before with another kind", tag));
      }
      e.value = value;
      e.max_outputs = max_outputs;
      return;
    }
  }
  SummaryEntry e;
  e.tag = std::string(name) + std::string(suffix);
  e.kind = kind;
  e.value = value;
  e.max_outputs = max_outputs;
  summaries_.push_back(std::move(e));
}

void TowerRegistry::record_moving(std::string_view name, const at::Tensor& value, double decay) {
  if (!value.defined()) {
    throw std::invalid_argument(
        fmt::format("TowerContext::add_moving_summary('{}'): the tensor is undefined", name));
  }
  if (value.numel() != 1) {
    throw std::invalid_argument(fmt::format(
        "TowerContext::add_moving_summary('{}'): the tensor must be a scalar, but has shape {}",
        name, fmt::format("[{}]", fmt::join(value.sizes(), ", "))));
  }
  if (!(decay >= 0.0 && decay < 1.0)) {
    throw std::invalid_argument(fmt::format(
        "TowerContext::add_moving_summary('{}'): decay must be in [0, 1), got {}", name, decay));
  }
  for (auto& m : moving_) {
    if (m.name != name) continue;
    if (!m.latest.defined()) {
      m.recorded = 1;
    } else if (m.micro_batch != micro_batch_) {
      // A later micro-batch of the same step: the earlier values are summed, and
      // update_moving_averages takes the mean.
      c10::NoGradGuard no_grad;
      const at::Tensor previous = m.latest.detach();
      m.earlier = m.earlier.defined() ? m.earlier + previous.to(m.earlier.device()) : previous;
      ++m.recorded;
    }
    m.latest = value;
    m.micro_batch = micro_batch_;
    return;
  }
  MovingAverage m;
  m.name = std::string(name);
  m.decay = decay;
  m.latest = value;
  m.recorded = 1;
  m.micro_batch = micro_batch_;
  for (auto it = restored_moving_.begin(); it != restored_moving_.end(); ++it) {
    if (it->name != name) continue;
    if (it->decay == decay) {  // continue from the checkpoint, on the value's device
      m.biased = at::full({}, it->biased, value.options().dtype(at::kFloat).requires_grad(false));
      m.updates = it->updates;
    } else {
      TP_LOG_WARN(
          "MovingAverageSummary: the moving average '{}' was saved with decay {}, but the tower "
          "now uses decay {}; it starts again",
          name, it->decay, decay);
    }
    restored_moving_.erase(it);
    break;
  }
  moving_.push_back(std::move(m));
}

void TowerRegistry::record_update_op(std::string_view name, std::function<void()> op) {
  if (!op) {
    throw std::invalid_argument(
        fmt::format("TowerContext::add_update_op('{}'): the op is empty", name));
  }
  for (auto& u : update_ops_) {
    if (u.name == name) {
      u.op = std::move(op);
      return;
    }
  }
  update_ops_.push_back(UpdateOp{std::string(name), std::move(op)});
}

size_t TowerRegistry::update_moving_averages() {
  c10::NoGradGuard no_grad;
  size_t n = 0;
  for (auto& m : moving_) {
    if (!m.latest.defined()) continue;
    // The common case (a 0-dim float32 loss) goes straight into lerp_ and allocates nothing.
    at::Tensor x = m.latest;
    if (x.dim() != 0) x = x.reshape({});
    if (x.scalar_type() != at::kFloat) x = x.to(at::kFloat);
    if (m.recorded > 1) {  // the mean over the step's micro-batches
      x = (x + m.earlier.to(x.device()).reshape({}).to(at::kFloat)) /
          static_cast<double>(m.recorded);
    }
    if (!m.biased.defined() || m.biased.device() != x.device()) {
      m.biased = at::zeros({}, x.options().requires_grad(false));
      m.updates = 0;
    }
    // biased_t = decay * biased_{t-1} + (1 - decay) * x_t, in place on x's device.
    m.biased.lerp_(x, 1.0 - m.decay);
    ++m.updates;
    ++n;
  }
  return n;
}

void TowerRegistry::run_update_ops() {
  for (auto& u : update_ops_) {
    if (u.op) u.op();
  }
}

std::vector<std::string> TowerRegistry::update_op_names() const {
  std::vector<std::string> names;
  for (const auto& u : update_ops_) names.push_back(u.name);
  return names;
}

std::vector<TowerRegistry::MovingAverageState> TowerRegistry::moving_average_states() const {
  std::vector<MovingAverageState> out;
  for (const auto& m : moving_) {
    if (m.updates == 0 || !m.biased.defined()) continue;
    out.push_back(MovingAverageState{m.name, m.decay, host_scalar(m.biased), m.updates});
  }
  out.insert(out.end(), restored_moving_.begin(), restored_moving_.end());
  return out;
}

void TowerRegistry::restore_moving_averages(std::vector<MovingAverageState> states) {
  restored_moving_.clear();
  for (auto& s : states) {
    MovingAverage* existing = nullptr;
    for (auto& m : moving_) {
      if (m.name == s.name) existing = &m;
    }
    if (existing == nullptr) {
      restored_moving_.push_back(std::move(s));
    } else if (existing->decay == s.decay) {
      const at::Device device = existing->biased.defined()   ? existing->biased.device()
                                : existing->latest.defined() ? existing->latest.device()
                                                             : at::Device(at::kCPU);
      existing->biased =
          at::full({}, s.biased, at::TensorOptions().dtype(at::kFloat).device(device));
      existing->updates = s.updates;
    } else {
      TP_LOG_WARN(
          "MovingAverageSummary: the moving average '{}' was saved with decay {}, but the tower "
          "uses decay {}; it starts again",
          s.name, s.decay, existing->decay);
    }
  }
}

void TowerRegistry::end_step() {
  for (auto& e : summaries_) e.value.reset();
  for (auto& m : moving_) {
    m.latest.reset();
    m.earlier.reset();
    m.recorded = 0;
  }
  for (auto& u : update_ops_) u.op = nullptr;
  micro_batch_ = 0;
}

TowerRegistry::StepRecord TowerRegistry::step_record() const {
  StepRecord record;
  for (const auto& e : summaries_) {
    if (e.value.defined()) record.summaries.push_back({e.tag, e.kind, e.value, e.max_outputs});
  }
  for (const auto& m : moving_) {
    if (m.latest.defined()) record.moving.push_back({m.name, m.latest, m.decay});
  }
  for (const auto& u : update_ops_) {
    if (u.op) record.update_ops.emplace_back(u.name, u.op);
  }
  return record;
}

void TowerRegistry::replay_step(const StepRecord& record) {
  for (const auto& s : record.summaries) record_summary(s.tag, s.kind, s.value, s.max_outputs);
  for (const auto& m : record.moving) record_moving(m.name, m.value, m.decay);
  for (const auto& u : record.update_ops) record_update_op(u.first, u.second);
}

}  // namespace trainpack
