#include "trainpack/callbacks/inference.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "trainpack/utils/host_read.h"

namespace trainpack {

namespace {

std::string bracketed_shape(const at::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes().begin(), t.sizes().end(), ", "));
}

// An inferencer that saw no sample has no statistic: 0 would read as a perfect score.
[[noreturn]] void fail_no_sample(const std::string& who, const std::string& stats) {
  throw std::runtime_error(fmt::format(
      "{}: no sample was seen, so {} cannot be computed; the validation data is empty (check the "
      "dataflow given to the InferenceRunner)",
      who, stats));
}

// The inferencer's sums of a round, as one process's after set_partial_sums: `totals` must have
// the size of partial_sums().
void check_totals(const std::string& who, size_t expected, const std::vector<double>& totals) {
  if (totals.size() != expected) {
    throw std::invalid_argument(fmt::format(
        "{}: set_partial_sums got {} values, but partial_sums() has {}; give it the element-wise "
        "sums over the ranks of partial_sums()",
        who, totals.size(), expected));
  }
}

}  // namespace

// ---- Inferencer ----

std::vector<double> Inferencer::partial_sums() const {
  if (!supports_partial_sums()) {
    throw std::logic_error(fmt::format(
        "{}: partial_sums() is not supported; override _supports_partial_sums, _partial_sums and "
        "_set_partial_sums (callbacks/inference.h)",
        name()));
  }
  return _partial_sums();
}

void Inferencer::set_partial_sums(const std::vector<double>& totals) {
  if (!supports_partial_sums()) {
    throw std::logic_error(
        fmt::format("{}: set_partial_sums() is not supported; override _supports_partial_sums, "
                    "_partial_sums and _set_partial_sums (callbacks/inference.h)",
                    name()));
  }
  check_totals(name(), _partial_sums().size(), totals);
  _set_partial_sums(totals);
}

// ---- ScalarStats ----

ScalarStats::ScalarStats(std::vector<std::string> names, std::string prefix)
    : names_(std::move(names)), prefix_(std::move(prefix)) {
  if (names_.empty()) {
    throw std::invalid_argument("ScalarStats: names is empty; name the scalar outputs to average");
  }
  for (const auto& n : names_) {
    if (n.empty()) throw std::invalid_argument("ScalarStats: a name is empty");
  }
}

void ScalarStats::_before_inference() {
  sums_.assign(names_.size(), 0.0);
  batches_ = 0;
}

void ScalarStats::_on_fetches(const std::vector<at::Tensor>& results) {
  if (sums_.size() != names_.size()) sums_.assign(names_.size(), 0.0);
  for (size_t i = 0; i < names_.size(); ++i) {
    if (results[i].numel() != 1) {
      throw std::invalid_argument(
          fmt::format("ScalarStats: output '{}' must be a scalar, but has shape {}", names_[i],
                      bracketed_shape(results[i])));
    }
    sums_[i] += host_scalar(results[i]);
  }
  ++batches_;
}

Inferencer::Stats ScalarStats::_after_inference() {
  Stats stats;
  std::string keys;
  for (size_t i = 0; i < names_.size(); ++i) {
    stats.emplace_back(prefix_.empty() ? names_[i] : prefix_ + "_" + names_[i],
                       batches_ == 0 ? 0.0 : sums_[i] / static_cast<double>(batches_));
    keys += fmt::format("{}'{}'", i == 0 ? "" : ", ", stats.back().first);
  }
  if (batches_ == 0) fail_no_sample(fmt::format("ScalarStats({})", keys), keys);
  return stats;
}

std::vector<double> ScalarStats::_partial_sums() const {
  std::vector<double> out = sums_;
  out.resize(names_.size(), 0.0);  // a round without batches has no sums yet
  out.push_back(static_cast<double>(batches_));
  return out;
}

void ScalarStats::_set_partial_sums(const std::vector<double>& totals) {
  sums_.assign(totals.begin(), totals.end() - 1);
  batches_ = static_cast<int64_t>(totals.back());
}

// ---- ClassificationError ----

ClassificationError::ClassificationError(std::string wrong_tensor_name, std::string summary_name)
    : wrong_name_(std::move(wrong_tensor_name)), summary_name_(std::move(summary_name)) {
  if (wrong_name_.empty() || summary_name_.empty()) {
    throw std::invalid_argument(
        "ClassificationError: wrong_tensor_name and summary_name must not be empty");
  }
}

void ClassificationError::_before_inference() {
  wrong_ = 0;
  total_ = 0;
}

void ClassificationError::_on_fetches(const std::vector<at::Tensor>& results) {
  const at::Tensor& v = results[0];
  if (v.dim() != 1) {
    throw std::invalid_argument(fmt::format(
        "ClassificationError: output '{}' is not a vector (one entry per sample, 1 = wrong): "
        "its shape is {}",
        wrong_name_, bracketed_shape(v)));
  }
  wrong_ += host_scalar(v.sum());
  total_ += v.size(0);
}

Inferencer::Stats ClassificationError::_after_inference() {
  if (total_ == 0) {
    fail_no_sample(fmt::format("ClassificationError('{}')", wrong_name_),
                   fmt::format("'{}'", summary_name_));
  }
  return {{summary_name_, wrong_ / static_cast<double>(total_)}};
}

std::vector<double> ClassificationError::_partial_sums() const {
  return {wrong_, static_cast<double>(total_)};
}

void ClassificationError::_set_partial_sums(const std::vector<double>& totals) {
  wrong_ = totals[0];
  total_ = static_cast<int64_t>(totals[1]);
}

// ---- BinaryClassificationStats ----

BinaryClassificationStats::BinaryClassificationStats(std::string pred_tensor_name,
                                                     std::string label_tensor_name,
                                                     std::string prefix)
    : pred_name_(std::move(pred_tensor_name)),
      label_name_(std::move(label_tensor_name)),
      prefix_(std::move(prefix)) {
  if (pred_name_.empty() || label_name_.empty()) {
    throw std::invalid_argument(
        "BinaryClassificationStats: pred_tensor_name and label_tensor_name must not be empty");
  }
}

void BinaryClassificationStats::_before_inference() {
  nr_pos_ = nr_pred_pos_ = corr_pos_ = samples_ = 0;
}

void BinaryClassificationStats::_on_fetches(const std::vector<at::Tensor>& results) {
  const at::Tensor& pred = results[0];
  const at::Tensor& label = results[1];
  if (pred.sizes() != label.sizes()) {
    throw std::invalid_argument(fmt::format(
        "BinaryClassificationStats: prediction '{}' {} and label '{}' {} have different shapes",
        pred_name_, bracketed_shape(pred), label_name_, bracketed_shape(label)));
  }
  const at::Tensor pred_pos = pred.eq(1);
  const at::Tensor label_pos = label.eq(1);
  nr_pos_ += host_scalar<int64_t>(label_pos.sum());
  nr_pred_pos_ += host_scalar<int64_t>(pred_pos.sum());
  corr_pos_ += host_scalar<int64_t>(pred_pos.logical_and(label_pos).sum());
  samples_ += pred.numel();
}

Inferencer::Stats BinaryClassificationStats::_after_inference() {
  if (samples_ == 0) {
    fail_no_sample(fmt::format("BinaryClassificationStats('{}', '{}')", pred_name_, label_name_),
                   fmt::format("'{0}_precision' and '{0}_recall'", prefix_));
  }
  const double precision =
      nr_pred_pos_ == 0 ? 0.0 : static_cast<double>(corr_pos_) / static_cast<double>(nr_pred_pos_);
  const double recall =
      nr_pos_ == 0 ? 0.0 : static_cast<double>(corr_pos_) / static_cast<double>(nr_pos_);
  return {{prefix_ + "_precision", precision}, {prefix_ + "_recall", recall}};
}

std::vector<double> BinaryClassificationStats::_partial_sums() const {
  return {static_cast<double>(nr_pos_), static_cast<double>(nr_pred_pos_),
          static_cast<double>(corr_pos_), static_cast<double>(samples_)};
}

void BinaryClassificationStats::_set_partial_sums(const std::vector<double>& totals) {
  nr_pos_ = static_cast<int64_t>(totals[0]);
  nr_pred_pos_ = static_cast<int64_t>(totals[1]);
  corr_pos_ = static_cast<int64_t>(totals[2]);
  samples_ = static_cast<int64_t>(totals[3]);
}

}  // namespace trainpack
