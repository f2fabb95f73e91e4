// Inferencers: what an InferenceRunner computes over a validation set (tensorpack's
// callbacks/inference.py): Inferencer, ScalarStats, ClassificationError,
// BinaryClassificationStats.
// A round: before_inference(), then on_fetches() with the outputs of each batch (in the order of
// get_fetches()), then after_inference() returns the statistics, which the runner puts to the
// monitors as scalars, in order. Inferencers are callbacks (the runner calls setup_graph, so
// trainer() works) but are driven only by their runner: they get no other training hook.
// Data-parallel validation: a runner that shards over the ranks all-reduces every inferencer's
// partial_sums() (float64 values that add up over disjoint parts: counts and sums, never a mean)
// and hands the totals back with set_partial_sums() before after_inference.
// See docs/inference.md ("Writing an inferencer") and docs/distributed.md.
// Differences from tensorpack: statistics are doubles by type (docs/tensorpack-differences.md
// #11); fetch names are the tower's output names (no `:0`).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainpack/core/callback.h"

namespace trainpack {

// tensorpack's Inferencer, the base: override the four protected hooks, and the three partial-sums
// ones to take part in data-parallel validation.
class Inferencer : public Callback {
 public:
  // Statistic name -> value, in the order they are put.
  using Stats = std::vector<std::pair<std::string, double>>;

  Inferencer() { enter_name_scope_ = false; }

  // Start of a round.
  void before_inference() { _before_inference(); }
  // The tower outputs this inferencer needs (asked once, at the runner's setup_graph).
  std::vector<std::string> get_fetches() { return _get_fetches(); }
  // One batch's outputs, in the order of get_fetches().
  void on_fetches(const std::vector<at::Tensor>& results) { _on_fetches(results); }
  // End of a round: the statistics to put.
  Stats after_inference() { return _after_inference(); }

  // Data-parallel validation: whether partial_sums() and set_partial_sums() are implemented.
  bool supports_partial_sums() const { return _supports_partial_sums(); }
  // After the last on_fetches of a round: the accumulated sums, which add up over disjoint parts
  // of the validation set. std::logic_error when not supported.
  std::vector<double> partial_sums() const;
  // Replaces the accumulated sums by `totals` (the element-wise sums over the ranks of
  // partial_sums()); after_inference follows. std::invalid_argument when `totals` does not have
  // the size partial_sums() has; std::logic_error when not supported.
  void set_partial_sums(const std::vector<double>& totals);

 protected:
  virtual void _before_inference() {}
  virtual std::vector<std::string> _get_fetches() = 0;
  virtual void _on_fetches(const std::vector<at::Tensor>& results) = 0;
  virtual Stats _after_inference() { return {}; }
  // Override all three to take part in data-parallel validation (default: not supported). The
  // sums must have the same size on every rank (zeros for an empty part). A sharding runner
  // refuses an inferencer without them at setup (std::invalid_argument naming it).
  virtual bool _supports_partial_sums() const { return false; }
  virtual std::vector<double> _partial_sums() const { return {}; }
  virtual void _set_partial_sums(const std::vector<double>& /*totals*/) {}
};

using InferencerPtr = std::shared_ptr<Inferencer>;

// tensorpack's ScalarStats: the mean over batches of scalar outputs (unweighted, as in
// tensorpack), as `{prefix}_{name}` (`name` with an empty prefix). Partial sums: each name's sum,
// then the batch count; sharded, the mean equals one process's bit for bit for float32 outputs
// within a bound (docs/distributed.md), and otherwise differs by less than n * 2^-53 relative.
// Errors: std::invalid_argument for empty names, or an output of more than one element;
// std::runtime_error from after_inference for a round without a batch ("... no sample was seen").
class ScalarStats : public Inferencer {
 public:
  explicit ScalarStats(std::vector<std::string> names, std::string prefix = "validation");
  // One name: ScalarStats("cost"), as tensorpack's ScalarStats('cost'). A template so that a
  // braced list, ScalarStats({"cost", "accuracy"}), still means the names and never a string.
  template <typename Name, std::enable_if_t<std::is_convertible_v<Name&&, std::string>, int> = 0>
  explicit ScalarStats(Name&& name, std::string prefix = "validation")
      : ScalarStats(std::vector<std::string>{std::string(std::forward<Name>(name))},
                    std::move(prefix)) {}
  // Not copyable. Declared in this form on purpose: with the implicit copy and move constructors,
  // `ScalarStats({"cost"})` would be ambiguous (the braced list could also build a temporary
  // through the one-name constructor), while a non-const reference cannot bind to one.
  ScalarStats(ScalarStats&) = delete;

 protected:
  void _before_inference() override;
  std::vector<std::string> _get_fetches() override { return names_; }
  void _on_fetches(const std::vector<at::Tensor>& results) override;
  Stats _after_inference() override;
  bool _supports_partial_sums() const override { return true; }
  std::vector<double> _partial_sums() const override;
  void _set_partial_sums(const std::vector<double>& totals) override;

 private:
  std::vector<std::string> names_;
  std::string prefix_;
  std::vector<double> sums_;
  int64_t batches_ = 0;
};

// tensorpack's ClassificationError: the error rate over all samples of the round. The output
// `wrong_tensor_name` is a vector, 1 per wrong sample; `summary_name` is sum / count over the round
// (batches of 4 and 2 with 1 and 2 errors give 0.5). Partial sums {wrong, samples}: exact.
// Errors: std::invalid_argument for an output that is not 1-D; std::runtime_error from
// after_inference for a round without a sample (tensorpack divides by zero).
class ClassificationError : public Inferencer {
 public:
  explicit ClassificationError(std::string wrong_tensor_name = "incorrect_vector",
                               std::string summary_name = "validation_error");

 protected:
  void _before_inference() override;
  std::vector<std::string> _get_fetches() override { return {wrong_name_}; }
  void _on_fetches(const std::vector<at::Tensor>& results) override;
  Stats _after_inference() override;
  bool _supports_partial_sums() const override { return true; }
  std::vector<double> _partial_sums() const override;
  void _set_partial_sums(const std::vector<double>& totals) override;

 private:
  std::string wrong_name_;
  std::string summary_name_;
  double wrong_ = 0;
  int64_t total_ = 0;
};

// tensorpack's BinaryClassificationStats: precision and recall of 0/1 predictions against 0/1
// labels over the round, as `{prefix}_precision` (0 when nothing is predicted positive) and
// `{prefix}_recall` (0 without positive labels). Partial sums: four counts, exact.
// Errors: std::invalid_argument for a prediction and label of different shapes;
// std::runtime_error from after_inference for a round without a sample.
class BinaryClassificationStats : public Inferencer {
 public:
  BinaryClassificationStats(std::string pred_tensor_name, std::string label_tensor_name,
                            std::string prefix = "val");

 protected:
  void _before_inference() override;
  std::vector<std::string> _get_fetches() override { return {pred_name_, label_name_}; }
  void _on_fetches(const std::vector<at::Tensor>& results) override;
  Stats _after_inference() override;
  bool _supports_partial_sums() const override { return true; }
  std::vector<double> _partial_sums() const override;
  void _set_partial_sums(const std::vector<double>& totals) override;

 private:
  std::string pred_name_;
  std::string label_name_;
  std::string prefix_;
  int64_t nr_pos_ = 0;
  int64_t nr_pred_pos_ = 0;
  int64_t corr_pos_ = 0;
  int64_t samples_ = 0;
};

}  // namespace trainpack
