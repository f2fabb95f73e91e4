// One module: DataParallelInferenceRunner is InferenceRunner's round (run_round) over several
// towers, sharing its towers, rounds and split over the ranks; tensorpack's inference_runner.py
// holds both too.
#include "trainpack/callbacks/inference_runner.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <thread>

#include "trainpack/callbacks/progress_bar.h"
#include "trainpack/core/exceptions.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/print_exception.h"
#include "trainpack/utils/process_io.h"

namespace trainpack {
namespace detail {

// One inference tower: the training module itself (on the training device) or a replica of it,
// run in eval mode under NoGradGuard.
class InferenceTower {
 public:
  InferenceTower(std::string name, TowerTrainer& trainer, c10::Device device, bool replicate)
      : name_(std::move(name)),
        tower_(trainer.tower_func()),
        signature_(trainer.input_signature()),
        device_(device),
        source_(trainer.module()) {
    if (replicate) {
      try {
        module_ = source_->clone(device);
      } catch (const std::exception& e) {
        throw std::invalid_argument(fmt::format(
            "{}: the module cannot be replicated on {} ({}); derive it from "
            "torch::nn::Cloneable (TORCH_MODULE with a Cloneable<Impl>), or evaluate on the "
            "training device",
            name_, device.str(), e.what()));
      }
    } else {
      module_ = source_;
    }
  }

  const std::string& name() const { return name_; }
  const c10::Device& device() const { return device_; }

  // Copies the training weights into a replica; puts the module in eval mode.
  void begin_round() {
    was_training_ = module_->is_training();
    if (module_ != source_) {
      torch::NoGradGuard no_grad;
      auto src_params = source_->named_parameters(true);
      for (auto& p : module_->named_parameters(true)) p.value().copy_(src_params[p.key()]);
      auto src_buffers = source_->named_buffers(true);
      for (auto& b : module_->named_buffers(true)) b.value().copy_(src_buffers[b.key()]);
      was_training_ = source_->is_training();
    }
    module_->eval();
  }
  void end_round() { module_->train(was_training_); }

  // Runs the tower on `batch` (already checked) and returns the outputs named `names`.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& batch,
                              const std::vector<std::string>& names) {
    torch::NoGradGuard no_grad;  // thread-local: every thread that runs a tower needs its own
    std::vector<at::Tensor> inputs;
    inputs.reserve(batch.size());
    for (const auto& t : batch) inputs.push_back(t.to(device_, /*non_blocking=*/true));
    std::vector<at::Tensor> outputs;
    TowerContext ctx(name_, /*is_training=*/false);
    ctx.set_module(module_.get());
    ctx.collect_outputs(&names, &outputs);
    ctx.output_returned_cost(tower_(ctx, inputs));
    if (module_ != source_) ctx.check_module_used(name_, device_.str());
    ctx.check_collected_outputs(name_, ", which an inferencer needs");
    return outputs;
  }

 private:
  std::string name_;
  TowerFunc tower_;
  InputSignature signature_;
  c10::Device device_;
  std::shared_ptr<torch::nn::Module> source_;
  std::shared_ptr<torch::nn::Module> module_;
  bool was_training_ = true;
};

}  // namespace detail

namespace {

// Called in a catch block for the exception that reading or running validation batch `index`
// (1-based) of a round of `size` batches (-1: unknown) threw: throws a std::runtime_error that
// names the batch, with the exception nested in it. StopTraining goes through as it is.
[[noreturn]] void rethrow_for_batch(const std::string& who, int64_t index, int64_t size,
                                    const std::string& part) {
  const std::string batch =
      fmt::format("{}: validation batch {} of {}{} failed", who, index,
                  size >= 0 ? std::to_string(size) : std::string("a pass of unknown size"), part);
  try {
    throw;
  } catch (const StopTraining&) {
    throw;
  } catch (const std::exception& e) {
    std::throw_with_nested(std::runtime_error(batch + ": " + exception_message(e)));
  } catch (...) {
    std::throw_with_nested(std::runtime_error(batch + ": an exception of unknown type"));
  }
}

// Puts every tower back in its mode when the round ends, also by an exception.
class RoundGuard {
 public:
  explicit RoundGuard(std::vector<std::unique_ptr<detail::InferenceTower>>& towers)
      : towers_(towers) {
    for (auto& t : towers_) t->begin_round();
  }
  ~RoundGuard() {
    for (auto& t : towers_) t->end_round();
  }
  RoundGuard(const RoundGuard&) = delete;
  RoundGuard& operator=(const RoundGuard&) = delete;

 private:
  std::vector<std::unique_ptr<detail::InferenceTower>>& towers_;
};

// The names a tower outputs are known only by running it. Before training, the first tower runs
// on the first batch of a pass of `input` (eval mode, no gradients), so that an inferencer asking
// for a name the tower never outputs fails now, naming what it does output, rather than after a
// whole epoch of training. Only for an input whose passes start over from the same data
// (DataFlow::seekable(): lists, FashionMnist, and batching and mapping over them): a generator
// may not, and the batch read here would be missing from the first round; its names are checked
// at the first round. An input that yields nothing is left to the round to report.
void check_fetches_exist(std::vector<std::unique_ptr<detail::InferenceTower>>& towers,
                         DataFlow& input, const InputSignature& signature,
                         const std::vector<std::string>& fetches, const std::string& who) {
  if (towers.empty() || fetches.empty() || !input.seekable()) return;
  torch::NoGradGuard no_grad;
  RoundGuard guard(towers);
  input.begin_pass();
  const std::optional<Datapoint> batch = input.next();
  if (!batch) return;
  check_inputs(signature, *batch, who);
  towers.front()->run(*batch, fetches);
}

// CPU replicas share the cores: while a parallel round runs, each gets its share of the intra-op
// threads (at least 1) instead of all of them. The towers' threads start after this, and ATen
// gives a new thread the process-wide count at its first parallel operation, so setting it here
// is enough; the destructor restores it (also on error) before the remainder and training.
// Measured (bench/train.cpp, case dp, 2 cores, T = 2): 2 replicas x 2 threads took 2.1 times as
// long as one InferenceRunner with 2 threads; 2 x 1 is 1.1 times faster than it.
class IntraOpThreadsShare {
 public:
  explicit IntraOpThreadsShare(int64_t cpu_towers) : saved_(at::get_num_threads()) {
    const int share = std::max(1, saved_ / static_cast<int>(std::max<int64_t>(1, cpu_towers)));
    if (cpu_towers > 1 && share != saved_) {
      at::set_num_threads(share);
      changed_ = true;
    }
  }
  ~IntraOpThreadsShare() {
    if (changed_) at::set_num_threads(saved_);
  }
  IntraOpThreadsShare(const IntraOpThreadsShare&) = delete;
  IntraOpThreadsShare& operator=(const IntraOpThreadsShare&) = delete;

 private:
  int saved_;
  bool changed_ = false;
};

// tqdm's line for a round on stderr: redrawn in place on a terminal (at most every 0.5 s), one
// final line elsewhere.
class RoundBar {
 public:
  RoundBar(bool enabled, int64_t total)
      : enabled_(enabled), terminal_(isatty(fileno(stderr)) != 0), total_(total) {
    start_ = std::chrono::steady_clock::now();
    interval_ = default_progress_refresh_interval(terminal_);
  }
  void update(int64_t n) {
    n_ += n;
    if (!enabled_ || !terminal_) return;
    const double t = elapsed();
    if (t - last_draw_ >= interval_) draw(t, false);
  }
  void close() {
    if (enabled_) draw(elapsed(), true);
  }

 private:
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void draw(double t, bool final) {
    last_draw_ = t;
    const double rate = t > 0 ? static_cast<double>(n_) / t : std::nan("");
    const std::string line =
        tqdm::format_meter(n_, total_ < 0 ? 0 : total_, t, rate, "", /*ascii=*/true);
    write_console(stderr, fmt::format("{}{}{}", terminal_ ? "\r" : "", line, final ? "\n" : ""));
  }

  bool enabled_;
  bool terminal_;
  int64_t total_;
  int64_t n_ = 0;
  double interval_ = 0.5;
  double last_draw_ = -1e9;
  std::chrono::steady_clock::time_point start_;
};

// Rank `rank`'s part of every pass of `ds` under data-parallel validation: the items at positions
// rank, rank + world, rank + 2 world, ... All of them: the parts of the ranks differ in size by at
// most one, and together they are exactly the pass. The others' items are skipped with seek()
// when `ds` seeks and its size is known (no batch is built for nothing), else read and dropped.
class RankPart : public DataFlow {
 public:
  RankPart(DataFlowPtr ds, int64_t rank, int64_t world)
      : ds_(std::move(ds)), rank_(rank), world_(world), whole_(ds_->size()) {
    seek_ = whole_.has_value() && ds_->seekable();
  }
  std::string name() const override { return ds_->name(); }
  std::optional<int64_t> size() const override {
    if (!whole_) return std::nullopt;
    return *whole_ > rank_ ? (*whole_ - rank_ + world_ - 1) / world_ : 0;
  }

 protected:
  void _begin_pass(int64_t pass) override {
    ds_->begin_pass(pass);
    skip_ = rank_;
  }
  std::optional<Datapoint> _next() override {
    if (const auto n = size(); n && position() >= *n) return std::nullopt;
    if (seek_) {
      if (skip_ > 0) ds_->seek(std::min(ds_->position() + skip_, *whole_));
    } else {
      for (int64_t i = 0; i < skip_; ++i) {
        if (!ds_->next()) return std::nullopt;
      }
    }
    skip_ = world_ - 1;
    return ds_->next();
  }

 private:
  DataFlowPtr ds_;
  int64_t rank_;
  int64_t world_;
  std::optional<int64_t> whole_;
  bool seek_ = false;
  int64_t skip_ = 0;  // items of the other ranks before this rank's next one
};

}  // namespace

// ---- InferenceRunner ----

InferenceRunner::InferenceRunner(DataFlowPtr input, std::vector<InferencerPtr> inferencers,
                                 InferenceRunnerOptions options)
    : input_(std::move(input)), inferencers_(std::move(inferencers)), options_(std::move(options)) {
  if (!input_) throw std::invalid_argument("InferenceRunner: the input dataflow is null");
  if (inferencers_.empty()) {
    throw std::invalid_argument(
        "InferenceRunner: no inferencers; give at least one (e.g. ScalarStats, "
        "ClassificationError)");
  }
  for (const auto& inf : inferencers_) {
    if (!inf) throw std::invalid_argument("InferenceRunner: an inferencer is null");
  }
  // Sharded, every rank runs its part (the collectives need every rank); the results stay the
  // chief's (chief_only keeps tensorpack's meaning).
  set_runs_on_every_rank(options_.shard_over_ranks());
}

InferenceRunner::InferenceRunner(DataFlowPtr input, InferencerPtr inferencer,
                                 InferenceRunnerOptions options)
    : InferenceRunner(std::move(input), std::vector<InferencerPtr>{std::move(inferencer)},
                      std::move(options)) {}

InferenceRunner::~InferenceRunner() = default;

void InferenceRunner::setup_towers(const std::vector<c10::Device>& devices,
                                   const std::string& who) {
  auto* tower_trainer = dynamic_cast<TowerTrainer*>(&trainer());
  if (tower_trainer == nullptr) {
    throw std::invalid_argument(fmt::format(
        "{} needs a trainer with a tower function (a TowerTrainer such as SimpleTrainer); this "
        "trainer has none",
        who));
  }
  for (size_t k = 0; k < devices.size(); ++k) {
    const c10::Device& device = devices[k];
    if (device.is_cuda() && !torch::cuda::is_available()) {
      throw std::runtime_error(fmt::format(
          "{}: device {} was requested, but no CUDA GPU is available; evaluate on the CPU", who,
          device.str()));
    }
    const std::string name =
        devices.size() == 1 ? options_.tower_name() : fmt::format("{}{}", options_.tower_name(), k);
    // The first tower on the training device shares the training module; every other is a
    // replica (a tower per thread must not share a module whose mode another thread switches).
    const bool replicate = k > 0 || device != tower_trainer->device();
    TP_LOG_INFO("[{}] Building tower '{}' on device {} ...", who, name, device.str());
    towers_.push_back(
        std::make_unique<detail::InferenceTower>(name, *tower_trainer, device, replicate));
  }

  // Its statistics come at its rounds only: the callbacks that read one by name wait for a round.
  trainer().monitors().add_validator(*this);
  fetches_.clear();
  positions_.clear();
  for (const auto& inf : inferencers_) {
    inf->setup_graph(trainer());
    std::vector<size_t> pos;
    for (const auto& name : inf->get_fetches()) {
      size_t i = 0;
      while (i < fetches_.size() && fetches_[i] != name) ++i;
      if (i == fetches_.size()) fetches_.push_back(name);
      pos.push_back(i);
    }
    positions_.push_back(std::move(pos));
  }

  const ProcessGroupPtr& group = trainer().process_group();
  sharded_ = options_.shard_over_ranks() && group && group->distributed();
  if (!sharded_) return;
  for (const auto& inf : inferencers_) {
    if (inf->supports_partial_sums()) continue;
    throw std::invalid_argument(fmt::format(
        "{}: the inferencer {} cannot combine its statistics over the {} ranks of data-parallel "
        "training, where every rank validates its part of the set; implement its "
        "_supports_partial_sums() (return true), _partial_sums() and _set_partial_sums() "
        "(callbacks/inference.h), or validate the whole set on the chief alone with "
        "InferenceRunnerOptions().shard_over_ranks(false)",
        who, inf->name(), group->world_size()));
  }
}

void InferenceRunner::prepare_rounds(std::optional<int64_t> size, const std::string& who,
                                     const std::string& where) {
  round_input_ = input_;
  if (sharded_) {
    const ProcessGroup& group = *trainer().process_group();
    round_input_ = std::make_shared<RankPart>(input_, group.rank(), group.world_size());
    const auto part = round_input_->size();
    size_ = part ? *part : -1;
    if (part) {
      TP_LOG_INFO(
          "[{}] Will eval {} iterations{}: rank {}'s part of the {} of each round, which {} "
          "ranks share",
          who, *part, where, group.rank(), *size, group.world_size());
    }
    return;
  }
  size_ = size ? *size : -1;
  if (size) TP_LOG_INFO("[{}] Will eval {} iterations{}", who, *size, where);
}

int64_t InferenceRunner::combine_over_ranks(int64_t done, const std::string& who) {
  ProcessGroup& group = *trainer().process_group();
  // One float64 tensor: this rank's batch count, then every inferencer's partial sums.
  std::vector<double> packed{static_cast<double>(done)};
  std::vector<size_t> sizes;
  for (const auto& inf : inferencers_) {
    const std::vector<double> sums = inf->partial_sums();
    sizes.push_back(sums.size());
    packed.insert(packed.end(), sums.begin(), sums.end());
  }
  const auto n = static_cast<int64_t>(packed.size());
  // Every rank must reduce as many values, or the all-reduce would pair up wrongly: an
  // inferencer whose partial_sums() size differs between ranks is an error on every rank.
  std::vector<at::Tensor> count{at::tensor({n, -n}, at::kLong)};
  group.all_reduce_max(count);
  // `count` and `totals` are CPU buffers that the ranks exchange: no device value.
  const int64_t most = count[0][0].item<int64_t>();
  const int64_t fewest = -count[0][1].item<int64_t>();
  if (most != fewest) {
    throw std::runtime_error(fmt::format(
        "{}: the ranks have different numbers of partial sums ({} to {}; this rank has {}): "
        "every rank must run the same inferencers, and each inferencer's partial_sums() must "
        "have the same size on every rank",
        who, fewest, most, n));
  }
  std::vector<at::Tensor> totals{at::tensor(packed, at::kDouble)};
  group.all_reduce_sum(totals);
  const double* t = totals[0].data_ptr<double>();
  size_t offset = 1;
  for (size_t i = 0; i < inferencers_.size(); ++i) {
    inferencers_[i]->set_partial_sums(std::vector<double>(t + offset, t + offset + sizes[i]));
    offset += sizes[i];
  }
  return static_cast<int64_t>(t[0]);
}

void InferenceRunner::_setup_graph() {
  auto* tower_trainer = dynamic_cast<TowerTrainer*>(&trainer());
  setup_towers({options_.device().value_or(tower_trainer ? tower_trainer->device()
                                                         : c10::Device(c10::kCPU))},
               "InferenceRunner");
}

void InferenceRunner::_before_train() {
  input_->reset_state();
  const auto size = input_->size();
  if (size && *size == 0) fail_empty_input("InferenceRunner", "its size() is 0");
  prepare_rounds(size, "InferenceRunner");
  check_fetches_exist(towers_, *input_, dynamic_cast<TowerTrainer&>(trainer()).input_signature(),
                      fetches_, "InferenceRunner");
  if (!size) {
    TP_LOG_WARN(
        "[InferenceRunner] Got an input with unknown size! Will iterate until the end of each "
        "pass of {}.",
        input_->name());
  }
}

void InferenceRunner::deliver(const std::vector<at::Tensor>& outputs) {
  std::vector<at::Tensor> results;
  for (size_t i = 0; i < inferencers_.size(); ++i) {
    results.clear();
    for (size_t p : positions_[i]) results.push_back(outputs[p]);
    inferencers_[i]->on_fetches(results);
  }
}

void InferenceRunner::run_round(bool parallel, const std::string& who) {
  torch::NoGradGuard no_grad;
  RoundGuard guard(towers_);
  for (auto& inf : inferencers_) inf->before_inference();
  round_input_->begin_pass();
  RoundBar bar(options_.progress_bar() && trainer().is_chief(), size_);
  const InputSignature& signature = dynamic_cast<TowerTrainer&>(trainer()).input_signature();

  auto next = [&]() -> std::optional<Datapoint> {
    auto batch = round_input_->next();
    if (batch) check_inputs(signature, *batch, who);
    return batch;
  };
  auto stopped_early = [&](int64_t done) {
    TP_LOG_ERROR(
        "[{}] input stopped before reaching its size()! You might need to check your input "
        "implementation.",
        who);
    throw std::runtime_error(
        fmt::format("{}: the dataflow {} ended after {} batches, but its size() is {}", who,
                    input_->name(), done, size_));
  };

  // A failure in a batch names it: which batch of the round, and whose part of the set.
  const std::string part =
      sharded_ ? fmt::format(" (rank {}'s part of the set)", trainer().process_group()->rank())
               : std::string();
  int64_t done = 0;
  const int64_t n_towers = static_cast<int64_t>(towers_.size());
  if (parallel && n_towers > 1) {
    const IntraOpThreadsShare share(std::count_if(
        towers_.begin(), towers_.end(), [](const auto& t) { return t->device().is_cpu(); }));
    std::vector<Datapoint> group(static_cast<size_t>(n_towers));
    std::vector<std::vector<at::Tensor>> outputs(static_cast<size_t>(n_towers));
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n_towers));
    while (size_ - done >= n_towers) {
      for (int64_t k = 0; k < n_towers; ++k) {
        std::optional<Datapoint> batch;
        try {
          batch = next();
        } catch (...) {
          rethrow_for_batch(who, done + k + 1, size_, part);
        }
        if (!batch) stopped_early(done + k);
        group[static_cast<size_t>(k)] = std::move(*batch);
      }
      std::vector<std::thread> threads;
      for (int64_t k = 1; k < n_towers; ++k) {
        threads.emplace_back([&, k] {
          const auto i = static_cast<size_t>(k);
          try {
            outputs[i] = towers_[i]->run(group[i], fetches_);
          } catch (...) {
            errors[i] = std::current_exception();
          }
        });
      }
      try {
        outputs[0] = towers_[0]->run(group[0], fetches_);
      } catch (...) {
        errors[0] = std::current_exception();
      }
      for (auto& t : threads) t.join();
      for (int64_t k = 0; k < n_towers; ++k) {
        const auto i = static_cast<size_t>(k);
        if (!errors[i]) continue;
        try {
          std::rethrow_exception(errors[i]);
        } catch (...) {
          rethrow_for_batch(who, done + k + 1, size_, part);
        }
      }
      for (int64_t k = 0; k < n_towers; ++k) {
        try {
          deliver(outputs[static_cast<size_t>(k)]);
        } catch (...) {
          rethrow_for_batch(who, done + k + 1, size_, part);
        }
      }
      done += n_towers;
      bar.update(n_towers);
    }
  }
  while (size_ < 0 || done < size_) {
    std::optional<Datapoint> batch;
    try {
      batch = next();
      if (batch) deliver(towers_[0]->run(*batch, fetches_));
    } catch (...) {
      rethrow_for_batch(who, done + 1, size_, part);
    }
    if (!batch) {
      if (size_ >= 0) stopped_early(done);
      break;
    }
    ++done;
    bar.update(1);
  }
  bar.close();
  batches_last_round_ = done;
  const int64_t total = sharded_ ? combine_over_ranks(done, who) : done;
  if (total == 0) fail_empty_input(who, "this round's pass yielded no batch");

  for (auto& inf : inferencers_) {
    for (const auto& [name, value] : inf->after_inference()) {
      trainer().monitors().put_scalar(name, value);
    }
  }
  trainer().monitors().validation_done(*this);
}

void InferenceRunner::_trigger() { run_round(/*parallel=*/false, "InferenceRunner"); }

void InferenceRunner::fail_empty_input(const std::string& who, const std::string& why) const {
  // No statistic can come out of it, and a missing one must not read as a perfect score. The
  // usual cause is a batch larger than the set: BatchData drops a short last batch by default.
  throw std::runtime_error(fmt::format(
      "{}: the input {} is empty ({}): there is nothing to validate on. A batch larger than the "
      "validation set yields no batch unless BatchData keeps the short last one: use a smaller "
      "batch, or BatchData(ds, batch_size, /*remainder=*/true); otherwise, is the validation set "
      "empty, or limited to 0 samples? Give it a dataflow that yields at least one batch",
      who, input_->describe(), why));
}

// ---- DataParallelInferenceRunner ----

DataParallelInferenceRunner::DataParallelInferenceRunner(DataFlowPtr input,
                                                         std::vector<InferencerPtr> inferencers,
                                                         std::vector<c10::Device> devices,
                                                         InferenceRunnerOptions options)
    : InferenceRunner(std::move(input), std::move(inferencers), std::move(options)),
      devices_(std::move(devices)) {
  if (devices_.empty()) {
    throw std::invalid_argument(
        "DataParallelInferenceRunner: devices is empty; give one device per tower (e.g. "
        "{c10::kCPU, c10::kCPU} for two CPU replicas)");
  }
}

void DataParallelInferenceRunner::_setup_graph() {
  setup_towers(devices_, "DataParallelInferenceRunner");
}

void DataParallelInferenceRunner::_before_train() {
  input_->reset_state();
  const auto size = input_->size();
  if (size && *size == 0) fail_empty_input("DataParallelInferenceRunner", "its size() is 0");
  if (!size || *size < 0) {
    throw std::invalid_argument(fmt::format(
        "DataParallelInferenceRunner: the input {} must have a known size > 0 (its size is {}); "
        "give it a dataflow of known size (DataFromList, FashionMnist, a DataFromGenerator given "
        "its size, or batches of one of them)",
        input_->name(), size ? std::to_string(*size) : std::string("unknown")));
  }
  prepare_rounds(size, "DataParallelInferenceRunner", fmt::format(" on {} towers", towers_.size()));
  check_fetches_exist(towers_, *input_, dynamic_cast<TowerTrainer&>(trainer()).input_signature(),
                      fetches_, "DataParallelInferenceRunner");
}

void DataParallelInferenceRunner::_trigger() {
  run_round(/*parallel=*/true, "DataParallelInferenceRunner");
}

}  // namespace trainpack
