#include "trainpack/input/parallel_map.h"

#include <dlfcn.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/Config.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

namespace trainpack {

namespace {

// Limits the intra-op parallelism of the calling thread to one thread, without changing it for
// any other thread. With OpenMP (Debian's LibTorch and pip's), at::set_num_threads would also set
// the process-wide count that ATen gives every thread at its first parallel operation (the
// training thread's later threads included); OpenMP's own omp_set_num_threads sets only the
// calling thread's count, which is what at::get_num_threads and at::parallel_for read on it.
// ATen initialises a thread's count once, at its first call: done here first, so that it cannot
// undo the limit later. The function is looked up at run time (LibTorch loads the OpenMP
// runtime; trainpack does not link it). With the native pool, shared by all threads, nothing.
void parallel_map_one_intra_op_thread() {
#if AT_PARALLEL_OPENMP
  (void)at::get_num_threads();
  using SetNumThreads = void (*)(int);
  static const auto set_num_threads =
      reinterpret_cast<SetNumThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set_num_threads != nullptr) set_num_threads(1);
#endif
}

}  // namespace

// Internal to this file, but named: types of Workers' members must not have internal linkage.
namespace detail {

// What a worker made of one input: the datapoint (nullopt: dropped) or the exception.
struct ParallelMapOutcome {
  std::optional<Datapoint> value;
  std::exception_ptr error;
};

struct ParallelMapJob {
  int64_t generation = 0;
  int64_t sequence = 0;
  Datapoint input;
  MapContext context;
};

}  // namespace detail

using detail::ParallelMapJob;
using detail::ParallelMapOutcome;

// The workers and what they share with the consumer, under `mutex`. `generation` changes with
// every begin_pass() and seek(): a result of an older generation is dropped by the worker that
// made it, so that it never reaches the new pass.
struct MultiThreadMapData::Workers {
  std::mutex mutex;
  std::condition_variable work_ready;  // workers wait for jobs (or stopping)
  std::condition_variable done_ready;  // the consumer waits for results
  std::deque<ParallelMapJob> jobs;
  std::map<int64_t, ParallelMapOutcome> done;  // by sequence number
  int64_t generation = 0;
  bool stopping = false;
  std::vector<std::thread> threads;

  void run(const MapData::ContextFunc& func) {
    parallel_map_one_intra_op_thread();
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      work_ready.wait(lock, [&] { return stopping || !jobs.empty(); });
      if (stopping) return;
      ParallelMapJob job = std::move(jobs.front());
      jobs.pop_front();
      lock.unlock();
      ParallelMapOutcome outcome;
      try {
        outcome.value = func(std::move(job.input), job.context);
      } catch (...) {
        outcome.error = std::current_exception();
      }
      lock.lock();
      if (job.generation == generation) {
        done.emplace(job.sequence, std::move(outcome));
        done_ready.notify_one();
      } else {
        lock.unlock();
        outcome = ParallelMapOutcome();  // a stale result, freed outside the lock
        lock.lock();
      }
    }
  }

  void stop_and_join() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    work_ready.notify_all();
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
    threads.clear();
  }
};

MultiThreadMapData::MultiThreadMapData(DataFlowPtr ds, int64_t num_threads, MapData::Func func,
                                       MultiThreadMapDataOptions options)
    : MultiThreadMapData(
          std::move(ds), num_threads,
          func ? MapData::ContextFunc([f = std::move(func)](Datapoint dp, const MapContext&) {
            return f(std::move(dp));
          })
               : MapData::ContextFunc(),
          options) {}

MultiThreadMapData::MultiThreadMapData(DataFlowPtr ds, int64_t num_threads,
                                       MapData::ContextFunc func, MultiThreadMapDataOptions options)
    : ds_(std::move(ds)),
      num_threads_(num_threads),
      func_(std::move(func)),
      options_(options),
      workers_(std::make_unique<Workers>()) {
  if (!ds_) throw std::invalid_argument("MultiThreadMapData: null dataflow");
  if (!func_) throw std::invalid_argument("MultiThreadMapData: empty function");
  if (num_threads_ < 1) {
    throw std::invalid_argument(
        fmt::format("MultiThreadMapData: num_threads must be >= 1, got {}", num_threads_));
  }
  if (options_.buffer_size() < num_threads_) {
    throw std::invalid_argument(
        fmt::format("MultiThreadMapData: buffer_size must be >= num_threads ({}), got {}; set "
                    "MultiThreadMapDataOptions().buffer_size(n) (default 200)",
                    num_threads_, options_.buffer_size()));
  }
}

MultiThreadMapData::~MultiThreadMapData() { workers_->stop_and_join(); }

std::string MultiThreadMapData::describe() const {
  return fmt::format("MultiThreadMapData({}) over {}", options_.strict() ? "strict" : "not strict",
                     ds_->describe());
}

const DataFlow* MultiThreadMapData::first_unseekable() const {
  return options_.strict() ? ds_->first_unseekable() : this;
}

void MultiThreadMapData::start_workers() {
  Workers& w = *workers_;
  try {
    for (int64_t i = 0; i < num_threads_; ++i) {
      w.threads.emplace_back([&w, this] { w.run(func_); });
    }
  } catch (...) {  // a thread could not start: none runs, and a later begin_pass tries again
    w.stop_and_join();
    std::lock_guard<std::mutex> lock(w.mutex);
    w.stopping = false;
    throw;
  }
}

void MultiThreadMapData::discard_in_flight(int64_t input_position) {
  std::deque<ParallelMapJob> jobs;
  std::map<int64_t, ParallelMapOutcome> done;
  {
    std::lock_guard<std::mutex> lock(workers_->mutex);
    ++workers_->generation;
    jobs.swap(workers_->jobs);
    done.swap(workers_->done);
  }
  in_flight_ = 0;
  next_sequence_ = 0;
  next_out_ = 0;
  input_position_ = input_position;
  input_ended_ = false;
  error_ = nullptr;
}  // the discarded jobs and results are freed here, outside the lock

void MultiThreadMapData::_begin_pass(int64_t pass) {
  if (workers_->threads.empty()) start_workers();
  discard_in_flight(0);
  ds_->begin_pass(pass);
}

void MultiThreadMapData::_seek(int64_t datapoints_consumed_in_this_pass) {
  if (!options_.strict()) DataFlow::_seek(datapoints_consumed_in_this_pass);  // throws
  discard_in_flight(datapoints_consumed_in_this_pass);
  ds_->seek(datapoints_consumed_in_this_pass);
}

void MultiThreadMapData::read_ahead() {
  Workers& w = *workers_;
  const int64_t generation = w.generation;  // written only by this thread
  while (!input_ended_ && in_flight_ < options_.buffer_size()) {
    ParallelMapJob job;
    bool failed = false;
    try {
      std::optional<Datapoint> dp = ds_->next();
      if (!dp) {
        input_ended_ = true;
        break;
      }
      job = ParallelMapJob{generation, next_sequence_, std::move(*dp),
                           MapContext{pass(), input_position_++}};
    } catch (...) {
      // The flow inside failed: its error takes the place of the next datapoint, in order.
      input_ended_ = true;
      failed = true;
      std::lock_guard<std::mutex> lock(w.mutex);
      w.done.emplace(next_sequence_, ParallelMapOutcome{std::nullopt, std::current_exception()});
    }
    ++next_sequence_;
    ++in_flight_;
    if (failed) break;
    {
      std::lock_guard<std::mutex> lock(w.mutex);
      w.jobs.push_back(std::move(job));
    }
    w.work_ready.notify_one();
  }
}

std::optional<Datapoint> MultiThreadMapData::_next() {
  if (error_) std::rethrow_exception(error_);
  Workers& w = *workers_;
  for (;;) {
    read_ahead();
    if (in_flight_ == 0) return std::nullopt;  // the flow inside ended and all is returned
    ParallelMapOutcome outcome;
    {
      std::unique_lock<std::mutex> lock(w.mutex);
      if (options_.strict()) {
        w.done_ready.wait(lock, [&] { return w.done.count(next_out_) > 0; });
        auto it = w.done.find(next_out_);
        outcome = std::move(it->second);
        w.done.erase(it);
        ++next_out_;
      } else {
        w.done_ready.wait(lock, [&] { return !w.done.empty(); });
        outcome = std::move(w.done.begin()->second);
        w.done.erase(w.done.begin());
      }
    }
    --in_flight_;
    if (outcome.error) {
      error_ = outcome.error;
      std::rethrow_exception(error_);
    }
    if (outcome.value) return std::move(outcome.value);
  }
}

}  // namespace trainpack
