// MultiThreadMapData: MapData whose function runs on worker threads (tensorpack's
// MultiThreadMapData), for datapoints that are slow to make (decoding, augmentation).
// docs/input.md, "Mapping on worker threads", shows it in use.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include <torch/arg.h>

#include "trainpack/input/dataflow.h"

namespace trainpack {

struct MultiThreadMapDataOptions {
  // Datapoints in flight at most: read from the flow inside but not yet returned by next(). At
  // least num_threads.
  TORCH_ARG(int64_t, buffer_size) = 200;
  // true: next() returns the results in the order of their inputs (seekable when the flow inside
  // is). false: in the order they complete; seek() is std::logic_error.
  TORCH_ARG(bool, strict) = true;
};

// Applies `func` to every datapoint of `ds` on `num_threads` worker threads; nullopt from func
// drops the datapoint (as MapData). The flow inside is read only by the thread that calls next()
// (flows are single-consumer): it reads ahead until buffer_size datapoints are in flight, and the
// workers only run func, which must therefore be safe to call from several threads at once.
//
// Order: with strict (the default) next() returns the results in the order of their inputs, the
// same sequence as MapData with the same function; position() counts what next() returned.
// Errors: an exception thrown by func on a worker (or by the flow inside while reading ahead) is
// rethrown, the same exception object, from next() at that datapoint's turn, after the datapoints
// before it; the pass cannot go on past it: every later next() of that pass rethrows it, and
// begin_pass() or seek() starts over.
// Passes and seek: begin_pass(k) and seek(n) discard the results of the work in flight (work that
// a worker already runs completes, and its result is dropped), then begin or seek the flow
// inside. seek(n) seeks `ds` to n: exact when func dropped nothing before n in the pass (as
// MapData). A ContextFunc gets the input's MapContext (pass, position of the input in the pass; n
// after seek(n)): for seeded augmentation that gives the same datapoints on a resumed run.
// Threads: the workers start at the first begin_pass() and are joined by the destructor, which
// waits for the calls of func that are running (but starts no other). Each worker limits its own
// intra-op parallelism to one thread where LibTorch uses OpenMP (there the count is per thread;
// the process-wide count and the caller's are left as they are): the workers share the cores
// instead of each starting a team of OpenMP threads. With LibTorch's native pool, shared by all
// threads, nothing is changed.
class MultiThreadMapData : public DataFlow {
 public:
  // A null `ds`, an empty function, num_threads < 1 or buffer_size < num_threads is
  // std::invalid_argument naming MultiThreadMapData and the argument.
  MultiThreadMapData(DataFlowPtr ds, int64_t num_threads, MapData::Func func,
                     MultiThreadMapDataOptions options = {});
  MultiThreadMapData(DataFlowPtr ds, int64_t num_threads, MapData::ContextFunc func,
                     MultiThreadMapDataOptions options = {});
  // Stops and joins the workers (the in-flight work is dropped).
  ~MultiThreadMapData() override;
  MultiThreadMapData(const MultiThreadMapData&) = delete;
  MultiThreadMapData& operator=(const MultiThreadMapData&) = delete;

  std::string name() const override { return "MultiThreadMapData"; }
  // "MultiThreadMapData(strict) over DataFromList (10 datapoints)" ("not strict" without strict).
  // Not the number of threads, which changes no datapoint: a checkpoint's data position (whose
  // input is recognised by describe()) stays valid when a resumed run uses other threads.
  std::string describe() const override;
  void reset_state() override { ds_->reset_state(); }
  // The size of `ds` (an upper bound when func drops).
  std::optional<int64_t> size() const override { return ds_->size(); }
  // With strict: the answer of `ds`; without: this.
  const DataFlow* first_unseekable() const override;

 protected:
  void _begin_pass(int64_t pass) override;
  std::optional<Datapoint> _next() override;
  void _seek(int64_t datapoints_consumed_in_this_pass) override;

 private:
  struct Workers;  // the threads and what they share with the consumer

  // Starts the workers (once).
  void start_workers();
  // Discards the work in flight, so that none of it reaches next() any more.
  void discard_in_flight(int64_t input_position);
  // Reads `ds` until buffer_size datapoints are in flight or it ends.
  void read_ahead();

  DataFlowPtr ds_;
  int64_t num_threads_;
  MapData::ContextFunc func_;
  MultiThreadMapDataOptions options_;
  std::unique_ptr<Workers> workers_;
  // The consumer's side: touched only by the thread that calls next(), begin_pass() and seek().
  int64_t in_flight_ = 0;       // handed to the workers and not yet returned or dropped
  int64_t next_sequence_ = 0;   // sequence number of the next input read
  int64_t next_out_ = 0;        // sequence number next() returns next (strict)
  int64_t input_position_ = 0;  // inputs read from ds_ in this pass
  bool input_ended_ = false;
  std::exception_ptr error_;  // the error that ended this pass
};

}  // namespace trainpack
