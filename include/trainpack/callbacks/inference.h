// Inferencers: what an InferenceRunner computes over a validation set (tensorpack's
// callbacks/inference.py). Public names: Inferencer, InferencerPtr, ScalarStats,
// ClassificationError, BinaryClassificationStats.
//
//   std::make_shared<InferenceRunner>(val_batches, std::vector<InferencerPtr>{
//       std::make_shared<ScalarStats>(std::vector<std::string>{"cost"}),
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
// Differences from tensorpack: statistics are doubles by type, so a non-scalar statistic, which
// tensorpack's float conversion handles badly, cannot happen (docs/tensorpack-differences.md #11);
// fetch names are the tower's output names (no `:0`).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainpack/callbacks/base.h"

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

 protected:
  virtual void _before_inference() {}
  virtual std::vector<std::string> _get_fetches() = 0;
  virtual void _on_fetches(const std::vector<at::Tensor>& results) = 0;
  virtual Stats _after_inference() { return {}; }
};

using InferencerPtr = std::shared_ptr<Inferencer>;

// The mean over batches of scalar outputs (an unweighted mean of per-batch values, as in
// tensorpack). Keys: `{prefix}_{name}`, or `name` with an empty prefix.
// Errors: an output with more than one element is std::invalid_argument naming it; empty names
// at construction; a round without any batch is std::runtime_error from after_inference
// ("ScalarStats('validation_cost'): no sample was seen, so 'validation_cost' cannot be computed;
// the validation data is empty ...").
class ScalarStats : public Inferencer {
 public:
  explicit ScalarStats(std::vector<std::string> names, std::string prefix = "validation");

 protected:
  void _before_inference() override;
  std::vector<std::string> _get_fetches() override { return names_; }
  void _on_fetches(const std::vector<at::Tensor>& results) override;
  Stats _after_inference() override;

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
class ClassificationError : public Inferencer {
 public:
  explicit ClassificationError(std::string wrong_tensor_name = "incorrect_vector",
                               std::string summary_name = "validation_error");

 protected:
  void _before_inference() override;
  std::vector<std::string> _get_fetches() override { return {wrong_name_}; }
  void _on_fetches(const std::vector<at::Tensor>& results) override;
  Stats _after_inference() override;

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
class BinaryClassificationStats : public Inferencer {
 public:
  BinaryClassificationStats(std::string pred_tensor_name, std::string label_tensor_name,
                            std::string prefix = "val");

 protected:
  void _before_inference() override;
  std::vector<std::string> _get_fetches() override { return {pred_name_, label_name_}; }
  void _on_fetches(const std::vector<at::Tensor>& results) override;
  Stats _after_inference() override;

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
