// DataFlow: the producers of datapoints that feed training (tensorpack's `dataflow` package:
// DataFlow, DataFromList, DataFromGenerator, BatchData, MapData). docs/input.md, "DataFlow", shows
// them in use and how they differ from tensorpack's.
//
// The iteration protocol, with tensorpack's names: reset_state() (`reset_state`) once, before the
// first pass, by whoever consumes the flow (a wrapper forwards it); begin_pass() (`__iter__`)
// starts pass 0, 1, 2, ..., and begin_pass(k) starts pass k directly (a resumed run; a pass's
// content may depend on k); next() (`next(it)`) returns the next datapoint, or nullopt once the
// pass is over (and on every call after that; before any begin_pass() it is std::logic_error);
// size() (`__len__`) is datapoints per pass, nullopt when unknown. pass(), position() and seek(n)
// say where the flow stands and put it, without reading, where it was after n datapoints of the
// pass (for exact resume; flows that cannot throw std::logic_error, and seekable() says so
// beforehand); n may be the pass's size. Flows are single-consumer: not thread-safe.
//
// An exception thrown inside a flow (a generator, a map function, a file read) propagates from
// next() as it is: nothing is swallowed or wrapped.
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
// stops cleanly (it is a StopTraining), with this message in the log. tensorpack raises
// StopTraining (or lets StopIteration through); the subclass tells an end of data from other stops.
class DataExhausted : public StopTraining {
 public:
  explicit DataExhausted(const std::string& message = "the dataflow has no more data")
      : StopTraining(message) {}
};

// The base of every dataflow (tensorpack's DataFlow): bookkeeping of pass and position around the
// protected virtual hooks that subclasses override (_begin_pass, _next, _seek).
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
  // Whether seek() works: DataFromList (and FashionMnist), and BatchData, MapData, ShardData or
  // MultiThreadMapData (strict) over a flow that seeks.
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

// A dataflow over datapoints held in memory (tensorpack's DataFromList); optionally shuffled per
// pass, in an order that depends only on (seed, k), the same with every compiler and LibTorch
// (tensorpack reseeds from the process). seek() is O(1). The returned tensors share storage with
// the list: do not modify them in place.
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

// A dataflow over a function (tensorpack's DataFromGenerator, which takes a generator per
// __iter__): each next() calls it; nullopt from it ends the pass. The next pass calls the same
// function again (a function that ended once ends every later pass at once unless it restarts
// itself). seek() is std::logic_error. size() is the `size` given, else unknown.
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

// Groups `batch_size` consecutive datapoints of `ds` into one (tensorpack's BatchData, without
// use_list), stacking each component along a new dimension 0. The last, smaller batch is produced
// only when `remainder` is true. A component whose count, shape or dtype differs from the batch's
// first datapoint is std::invalid_argument naming BatchData, the component and both shapes.
// size() is size(ds) / batch_size, rounded up with remainder. seek(n) seeks `ds` to
// n * batch_size (to the end of the pass for n = size() with remainder).
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

// Where a datapoint stands in its flow, for map functions whose result depends on it (seeded
// augmentation): the pass, and the position of the INPUT datapoint within the pass (0-based).
struct MapContext {
  int64_t pass = 0;
  int64_t position = 0;
};

// Applies `func` to every datapoint of `ds` (tensorpack's MapData); nullopt from func drops the
// datapoint. size() is the size of `ds` (an upper bound when func drops). seek(n) seeks `ds` to n,
// exact only when func drops nothing in the skipped part; func must be deterministic for exact
// resume. A ContextFunc also gets the MapContext of its input: the pass, and the input's position
// in the pass (inputs read from `ds` in the pass; n after seek(n)), so that a seeded augmentation
// gives the same result on a resumed run.
class MapData : public DataFlow {
 public:
  using Func = std::function<std::optional<Datapoint>(Datapoint)>;
  using ContextFunc = std::function<std::optional<Datapoint>(Datapoint, const MapContext&)>;
  // A null `ds` or an empty function is std::invalid_argument.
  MapData(DataFlowPtr ds, Func func);
  MapData(DataFlowPtr ds, ContextFunc func);
  std::string name() const override { return "MapData"; }
  std::string describe() const override { return "MapData over " + ds_->describe(); }
  void reset_state() override { ds_->reset_state(); }
  std::optional<int64_t> size() const override { return ds_->size(); }
  const DataFlow* first_unseekable() const override { return ds_->first_unseekable(); }

 protected:
  void _begin_pass(int64_t pass) override;
  std::optional<Datapoint> _next() override;
  void _seek(int64_t datapoints_consumed_in_this_pass) override;

 private:
  DataFlowPtr ds_;
  ContextFunc func_;
  int64_t input_position_ = 0;  // inputs read from ds_ in this pass
};

}  // namespace trainpack
