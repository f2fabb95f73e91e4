// Inferencers: what an InferenceRunner computes over a validation set (tensorpack's
// callbacks/inference.py). Public names: Inferencer, InferencerPtr, ScalarStats,
// ClassificationError, BinaryClassificationStats.
//
//   std::make_shared<InferenceRunner>(val_batches, std::vector<InferencerPtr>{
//       std::make_shared<ScalarStats>("cost"),
//       std::make_shared<ClassificationError>("wrong-top1", "val-error-top1")});
//
// An inferencer names the tower outputs it wants (get_fetches); for every batch the runner calls
// on_fetches with those outputs of that batch, in the same order; at the end of the round
// after_inference returns the statistics, which the runner puts to the monitors as scalars (in
// the order returned).
//
//   round:  before_inference()  ->  on_fetches(outputs of batch 1) ... on_fetches(batch n)
//           ->  after_inference() -> {("val-error-top1", 0.083)}  -> put_scalar each
//
// Writing one: derive from Inferencer and override the four protected hooks.
//
//   class MeanAbs : public trainpack::Inferencer {
//    protected:
//     void _before_inference() override { sum_ = 0; n_ = 0; }
//     std::vector<std::string> _get_fetches() override { return {"residual"}; }
//     void _on_fetches(const std::vector<at::Tensor>& r) override {
//       sum_ += r[0].abs().sum().item<double>(); n_ += r[0].numel();
//     }
//     Stats _after_inference() override {
//       if (n_ == 0) throw std::runtime_error("MeanAbs: no sample was seen");  // not a 0
//       return {{"val-mae", sum_ / n_}};
//     }
//     double sum_ = 0; int64_t n_ = 0;
//   };
//
// Inferencers are callbacks (they get setup_graph with the trainer, so trainer() works) but are
// driven only by their runner: they receive no other training hook.
//
// Data-parallel validation (docs/distributed.md): under a process group of more than one rank,
// every rank runs the round on its own part of the validation set, and the statistics must come
// out as one process's over the whole set. An inferencer takes part by exposing the sums it
// accumulated as float64 values that add up over disjoint parts (counts, sums of errors; never a
// ratio or a mean): the runner all-reduces every inferencer's sums in one call, gives each its
// totals back, and after_inference then computes from the totals what one process would.
//
//   round on rank r:  before_inference -> on_fetches(its batches) -> partial_sums() -> all-reduce
//                     -> set_partial_sums(totals) -> after_inference (same on every rank)
//
// For MeanAbs above, the three overrides are:
//
//     bool _supports_partial_sums() const override { return true; }
//     std::vector<double> _partial_sums() const override {
//       return {sum_, static_cast<double>(n_)};
//     }
//     void _set_partial_sums(const std::vector<double>& s) override {
//       sum_ = s[0]; n_ = static_cast<int64_t>(s[1]);
//     }
//
// partial_sums() must return the same number of values on every rank (the same inferencer on
// every rank does), also on a rank whose part is empty (its zeros). An inferencer that does not
// implement them cannot be used by an InferenceRunner that shards over the ranks:
// std::invalid_argument at setup names it and these three functions (or run that runner on the
// chief alone, over the whole set: InferenceRunnerOptions::shard_over_ranks(false)).
// Exactness: a sum of integer counts is exact in float64 (up to 2^53), so statistics made of
// counts (ClassificationError, BinaryClassificationStats) equal one process's bit for bit; for
// sums of real values see ScalarStats.
//
// Differences from tensorpack: statistics are doubles by type, so a non-scalar statistic, which
// tensorpack's float conversion handles badly, cannot happen (docs/tensorpack-differences.md #11);
// fetch names are the tower's output names (no `:0`).
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

  // Data-parallel validation (see the top of this file): whether this inferencer implements
  // partial_sums() and set_partial_sums().
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
  // Override all three to take part in data-parallel validation (default: not supported).
  virtual bool _supports_partial_sums() const { return false; }
  virtual std::vector<double> _partial_sums() const { return {}; }
  virtual void _set_partial_sums(const std::vector<double>& /*totals*/) {}
};

using InferencerPtr = std::shared_ptr<Inferencer>;

// The mean over batches of scalar outputs (an unweighted mean of per-batch values, as in
// tensorpack). Keys: `{prefix}_{name}`, or `name` with an empty prefix.
// Partial sums: per name the sum of the per-batch values (float64), then the number of batches.
// Sharded over ranks, the batches are the single process's (the runner shards whole batches), so
// the mean is the same sum divided by the same count; only the order of the additions differs.
// That order cannot change the result when no addition rounds: guaranteed for outputs of float32
// (or a narrower type) whenever n * max|v| / min|v| < 2^29, over the n batch values v of a round
// that are not 0 (each such value is a multiple of ulp32(min|v|) = 2^-23 * 2^floor(log2 min|v|),
// and every partial sum, at most n * max|v|, then fits in float64's 53 bits). Then the mean equals
// one process's bit for bit (validation losses: n = 10^4 batches with values within a factor of
// 5 * 10^4 of each other). Beyond that, and for float64 outputs, it may differ from one process's
// in the last bits (a relative difference below n * 2^-53).
// Errors: an output with more than one element is std::invalid_argument naming it; empty names
// at construction; a round without any batch is std::runtime_error from after_inference
// ("ScalarStats('validation_cost'): no sample was seen, so 'validation_cost' cannot be computed;
// the validation data is empty ...").
class ScalarStats : public Inferencer {
 public:
  explicit ScalarStats(std::vector<std::string> names, std::string prefix = "validation");
  // One name: ScalarStats("cost"), as tensorpack's ScalarStats('cost'). A template so that a
  // braced list, ScalarStats({"cost", "accuracy"}), still means the names and never a string.
  template <typename Name, std::enable_if_t<std::is_convertible_v<Name&&, std::string>, int> = 0>
  explicit ScalarStats(Name&& name, std::string prefix = "validation")
      : ScalarStats(std::vector<std::string>{std::string(std::forward<Name>(name))},
                    std::move(prefix)) {}
  // Not copyable. Declared in this form on purpose: with the implicit `ScalarStats(const
  // ScalarStats&)` and move constructor, `ScalarStats({"cost"})` and `ScalarStats({"a", "b"})`
  // would be ambiguous (the braced list could also build a temporary through the one-name
  // constructor above), while a non-const reference cannot bind to such a temporary.
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

// The error rate over all samples: the output `wrong_tensor_name` is a vector with one entry per
// sample, 1 where the prediction is wrong; the stat `summary_name` is sum / count over the whole
// round (so batches of 4 and 2 with 1 and 2 errors give 3/6 = 0.5, not the mean of 0.25 and 1).
// Errors: an output that is not 1-D is std::invalid_argument naming it (tensorpack asserts
// `{name} is not a vector!`); a round without any sample is std::runtime_error from
// after_inference ("ClassificationError('wrong-top1'): no sample was seen, so 'val-error-top1'
// cannot be computed; the validation data is empty ..."), where tensorpack divides by zero and a
// zero count would read as a perfect score.
// Partial sums: {wrong, samples}. Sums of 0/1 entries are integers, exact in float64, so the
// sharded error rate equals one process's bit for bit.
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

// Precision and recall of 0/1 predictions against 0/1 labels, accumulated over the round:
// precision = #(pred=1 and label=1) / #(pred=1) (0 when nothing is predicted positive), recall =
// #(pred=1 and label=1) / #(label=1) (0 without positive labels). Keys `{prefix}_precision`,
// `{prefix}_recall`. Errors: prediction and label of different shapes (std::invalid_argument
// naming both and their shapes); a round without any sample (std::runtime_error from
// after_inference naming the inferencer and both statistics).
// Partial sums: {label positives, predicted positives, correct positives, samples}: counts, so
// sharded statistics equal one process's bit for bit.
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
