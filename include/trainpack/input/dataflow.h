// DataFlow: the producers of datapoints that feed training (tensorpack's `dataflow` package).
// Public names: Datapoint, DataFlow, DataFlowPtr, DataExhausted, DataFromList, DataFromGenerator,
// BatchData, MapData.
//
//   auto ds = std::make_shared<BatchData>(
//       std::make_shared<DataFromList>(points, DataFromListOptions().shuffle(true).seed(7)), 32);
//   ds->reset_state();
//   for (int epoch = 0; epoch < 3; ++epoch) {
//     ds->begin_pass();
//     while (auto batch = ds->next()) train_on(*batch);
//   }
//
// The iteration protocol, with tensorpack's names:
//   - reset_state()  (tensorpack's `reset_state`): called once, before the first pass, by whoever
//     consumes the flow (an input source); a wrapper forwards it to the flow it wraps.
//   - begin_pass()   (tensorpack's `__iter__`): starts a new pass. Passes are numbered 0, 1, 2, ...
//     begin_pass(k) starts pass k directly (what a resumed run does). A pass's content may depend
//     on its number (DataFromList shuffles pass k with (seed, k)).
//   - next()         (`next(it)`): the next datapoint of the pass, or nullopt once the pass is
//     over (and on every call after that). Calling it before any begin_pass() is a
//     std::logic_error.
//   - size()         (`__len__`): datapoints per pass, nullopt when unknown (tensorpack raises
//     NotImplementedError instead).
//   - pass(), position(), seek(n): where the flow stands, for exact resume. position()
//     is the number of datapoints next() returned in this pass; begin_pass(k) then seek(n) puts
//     the flow where it was after n datapoints of pass k, without reading those n (flows that
//     cannot do that throw std::logic_error from seek; seekable() tells beforehand). n may be
//     the pass's size: next() then ends the pass. Flows are single-consumer: not thread-safe.
//     FeedInput and QueueInput save (pass, position) in every checkpoint and seek there on
//     resume; a resumed run over a flow that cannot seek is refused.
//
// An exception thrown inside a flow (a generator, a map function, a file read) propagates from
// next() as it is: nothing is swallowed or wrapped. An input source that runs out of data when
// training wants more throws DataExhausted, which ends training as StopTraining does.
//
// Differences from tensorpack: iteration is begin_pass()/next() instead of Python's iterator
// protocol; passes are numbered and positions are seekable (tensorpack has no exact resume);
// size() returns nullopt instead of raising; shuffling uses the flow's own seeded generator (a
// pure function of (seed, pass)), not a shared RNG reset in reset_state().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include "trainpack/core/exceptions.h"

namespace trainpack {

// One datapoint: a list of components (e.g. {image, label}), as tensorpack's list datapoints.
using Datapoint = std::vector<at::Tensor>;

// Thrown by an input source when its dataflow ends while training still wants data; training
// stops cleanly (it is a StopTraining), with this message in the log.
//   throw DataExhausted("QueueInput: the dataflow has no more data");
// Differences from tensorpack: tensorpack raises StopTraining (or lets StopIteration through);
// the subclass lets callers tell an end of data from other stops.
class DataExhausted : public StopTraining {
 public:
  explicit DataExhausted(const std::string& message = "the dataflow has no more data")
      : StopTraining(message) {}
};

// The base of every dataflow: bookkeeping of pass and position around the protected virtual
// hooks that subclasses override (_begin_pass, _next, _seek). See the protocol above.
//   ds->reset_state(); ds->begin_pass(); while (auto dp = ds->next()) use(*dp);
// Differences from tensorpack: see the top of this file.
class DataFlow {
 public:
  virtual ~DataFlow();
  // Class name for messages ("BatchData").
  virtual std::string name() const = 0;
  // Once before the first pass (tensorpack's reset_state). Wrappers forward it.
  virtual void reset_state() {}
  // Datapoints per pass; nullopt when unknown (tensorpack's __len__).
  virtual std::optional<int64_t> size() const { return std::nullopt; }
  // The flow and the flows inside it, for messages about what it yields:
  // "BatchData(batch_size=4096) over FashionMnist (1600 datapoints)". Default: name() and, when
  // known, size(); a wrapper gives its arguments and "over" the flow it wraps.
  virtual std::string describe() const;

  // Starts the pass after the current one (pass 0 first).
  void begin_pass();
  // Starts pass `pass` (>= 0) directly: a resumed run's first pass.
  void begin_pass(int64_t pass);
  // The next datapoint of this pass, or nullopt when the pass is over.
  std::optional<Datapoint> next();

  // The current pass number; -1 before the first begin_pass().
  int64_t pass() const { return pass_; }
  // Datapoints next() returned in this pass.
  int64_t position() const { return position_; }
  // Puts the flow where it stood after `datapoints_consumed_in_this_pass` datapoints of the
  // current pass, without reading them. Needs a begin_pass() first (std::logic_error otherwise);
  // a negative count is std::invalid_argument; flows that cannot seek throw std::logic_error.
  void seek(int64_t datapoints_consumed_in_this_pass);
  // Whether seek() works: DataFromList (and FashionMnist), and BatchData, MapData or ShardData
  // over a flow that seeks.
  bool seekable() const { return first_unseekable() == nullptr; }
  // The flow that keeps this one from seeking: itself, or (for a wrapper) the flow inside it that
  // cannot; nullptr when seek() works. A subclass that implements _seek overrides this too
  // (returning nullptr, or the answer of the flow it wraps). Default: this.
  virtual const DataFlow* first_unseekable() const { return this; }

 protected:
  virtual void _begin_pass(int64_t pass) = 0;
  virtual std::optional<Datapoint> _next() = 0;
  // Default: throws std::logic_error "<name> does not support seek".
  virtual void _seek(int64_t datapoints_consumed_in_this_pass);

 private:
  int64_t pass_ = -1;
  int64_t position_ = 0;
  bool ended_ = false;
};

using DataFlowPtr = std::shared_ptr<DataFlow>;

struct DataFromListOptions {
  // Shuffle the datapoints of every pass.
  TORCH_ARG(bool, shuffle) = false;
  // The order of pass k is a pure function of (seed, k).
  TORCH_ARG(uint64_t, seed) = 0;
};

// A dataflow over datapoints held in memory; optionally shuffled per pass.
//   auto ds = std::make_shared<DataFromList>(points, DataFromListOptions().shuffle(true).seed(1));
// The order of pass k depends only on (seed, k), from a hand-written Fisher-Yates shuffle over
// std::mt19937_64 (the standard fixes mt19937_64's output, not the distributions', so the order is
// the same with every compiler and LibTorch). seek() is O(1) after the pass's permutation, built
// at begin_pass(). The returned tensors share storage with the list: do not modify them in place.
// Differences from tensorpack: DataFromList(lst, shuffle) shuffles with the flow's RNG, which
// reset_state() reseeds from the process; here the order is reproducible from the seed.
class DataFromList : public DataFlow {
 public:
  explicit DataFromList(std::vector<Datapoint> datapoints, DataFromListOptions options = {});
  std::string name() const override { return "DataFromList"; }
  std::optional<int64_t> size() const override { return static_cast<int64_t>(datapoints_.size()); }
  // "DataFromList (10 datapoints)", with ", shuffled with seed 7" when shuffled: the seed decides
  // the order, so two runs (or two ranks) with other seeds read other data.
  std::string describe() const override;
  // The order of pass `pass` as indices into the list (the identity without shuffle).
  std::vector<int64_t> order_of_pass(int64_t pass) const;
  const DataFlow* first_unseekable() const override { return nullptr; }

 protected:
  void _begin_pass(int64_t pass) override;
  std::optional<Datapoint> _next() override;
  void _seek(int64_t datapoints_consumed_in_this_pass) override;

 private:
  std::vector<Datapoint> datapoints_;
  DataFromListOptions options_;
  std::vector<int64_t> order_;
  size_t index_ = 0;
};

// A dataflow over a function: each next() calls it; nullopt from it ends the pass. The next pass
// calls the same function again (so a function that ends once, ends every later pass at once
// unless it restarts itself).
//   DataFromGenerator gen([i = 0]() mutable -> std::optional<Datapoint> {
//     if (i == 3) return std::nullopt; return Datapoint{torch::tensor(i++)}; });
// seek() is not supported (std::logic_error). size() is the `size` given, else unknown.
// Differences from tensorpack: tensorpack's DataFromGenerator takes a generator (or a function
// returning one) per __iter__; here the function is called per datapoint.
class DataFromGenerator : public DataFlow {
 public:
  using Generator = std::function<std::optional<Datapoint>()>;
  explicit DataFromGenerator(Generator generator, std::optional<int64_t> size = std::nullopt);
  std::string name() const override { return "DataFromGenerator"; }
  std::optional<int64_t> size() const override { return size_; }

 protected:
  void _begin_pass(int64_t) override {}
  std::optional<Datapoint> _next() override { return generator_(); }

 private:
  Generator generator_;
  std::optional<int64_t> size_;
};

// Groups `batch_size` consecutive datapoints of `ds` into one, stacking each component along a
// new dimension 0 (at::stack). The last, smaller batch is produced only when `remainder` is true.
//   auto batches = std::make_shared<BatchData>(ds, 64);  // {[64,28,28] float, [64] int64}
// Every datapoint of a batch must have the same number of components and, per component, the
// same shape and dtype as the batch's first datapoint: otherwise std::invalid_argument naming
// BatchData, the component index and both shapes. size() is size(ds) / batch_size, rounded up
// with remainder. seek(n) seeks `ds` to n * batch_size (to the end of the pass for n = size()
// with remainder, whose last batch is short).
// Differences from tensorpack: no use_list (components are always stacked tensors); tensorpack
// turns a mismatch into a generic numpy error after the fact, here the message says where.
class BatchData : public DataFlow {
 public:
  // batch_size < 1 is std::invalid_argument.
  BatchData(DataFlowPtr ds, int64_t batch_size, bool remainder = false);
  std::string name() const override { return "BatchData"; }
  std::string describe() const override;
  void reset_state() override { ds_->reset_state(); }
  std::optional<int64_t> size() const override;
  const DataFlow* first_unseekable() const override { return ds_->first_unseekable(); }

 protected:
  void _begin_pass(int64_t pass) override { ds_->begin_pass(pass); }
  std::optional<Datapoint> _next() override;
  void _seek(int64_t datapoints_consumed_in_this_pass) override;

 private:
  DataFlowPtr ds_;
  int64_t batch_size_;
  bool remainder_;
};

// Applies `func` to every datapoint of `ds`; a datapoint for which func returns nullopt is
// dropped (tensorpack's MapData returning None).
//   MapData flipped(ds, [](Datapoint dp) -> std::optional<Datapoint> {
//     dp[0] = dp[0].flip({1}); return dp; });
// size() is the size of `ds`, as tensorpack's MapData keeps len(ds): with a func that drops, it
// is an upper bound. seek(n) seeks `ds` to n, which is exact only when func drops nothing in the
// skipped part (positions count output datapoints); func must be deterministic for exact resume.
// Differences from tensorpack: none in behaviour; the seek caveat is trainpack's.
class MapData : public DataFlow {
 public:
  using Func = std::function<std::optional<Datapoint>(Datapoint)>;
  MapData(DataFlowPtr ds, Func func);
  std::string name() const override { return "MapData"; }
  std::string describe() const override { return "MapData over " + ds_->describe(); }
  void reset_state() override { ds_->reset_state(); }
  std::optional<int64_t> size() const override { return ds_->size(); }
  const DataFlow* first_unseekable() const override { return ds_->first_unseekable(); }

 protected:
  void _begin_pass(int64_t pass) override { ds_->begin_pass(pass); }
  std::optional<Datapoint> _next() override;
  void _seek(int64_t datapoints_consumed_in_this_pass) override {
    ds_->seek(datapoints_consumed_in_this_pass);
  }

 private:
  DataFlowPtr ds_;
  Func func_;
};

}  // namespace trainpack
