// One module over 700 lines: Trainer is tensorpack's Trainer, one class: the loop and the API that
// callbacks call on it (counters, stop, failures). The ranks' stop vote and the write-failure
// ledger live apart (detail/stop_vote.h, core/write_failures.h).
#include "trainpack/core/trainer.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <exception>
#include <stdexcept>
#include <typeinfo>

#include "trainpack/core/step_counter.h"
#include "trainpack/detail/signals.h"
#include "trainpack/detail/torch_compat.h"
#include "trainpack/utils/demangle.h"
#include "trainpack/utils/error_file.h"
#include "trainpack/utils/humanize.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/process_io.h"
#include "trainpack/utils/version.h"

namespace trainpack {

std::string SessionInit::name() const { return class_name(typeid(*this)); }

int exit_code_for_signal(int signal) { return signal == 0 ? 0 : 128 + signal; }

std::string stop_signal_name(int signal) { return detail::signal_name(signal); }

std::vector<int> default_stop_signals() { return detail::default_stop_signals(); }

Trainer::Trainer() : step_context_(*this) {}
Trainer::~Trainer() = default;

void Trainer::call_once(bool& flag, const char* method) const {
  if (flag) {
    throw std::logic_error(fmt::format("Method {}.{} can only be called once per object!",
                                       class_name(typeid(*this)), method));
  }
  flag = true;
}

Monitors& Trainer::monitors() const {
  if (!monitors_) {
    throw std::logic_error("Trainer::monitors() is available after setup_callbacks()");
  }
  return *monitors_;
}

bool Trainer::register_callback(CallbackPtr callback) {
  if (!callback) throw std::invalid_argument("Trainer::register_callback: callback is null");
  if (setup_done_) {
    throw std::logic_error(fmt::format(
        "Cannot register more callbacks after trainer was setup! ({})", callback->name()));
  }
  const bool in_group = process_group_ && process_group_->distributed();
  if (!is_chief_ && callback->chief_only() && !(in_group && callback->runs_on_every_rank())) {
    // tensorpack's warning; in a data-parallel group every rank but the chief skips these by
    // design, so there it is information (which those ranks do not log).
    if (in_group) {
      TP_LOG_INFO("Callback {} is chief-only, skipped.", callback->name());
    } else {
      TP_LOG_WARN("Callback {} is chief-only, skipped.", callback->name());
    }
    return false;
  }
  registered_.push_back(std::move(callback));
  return true;
}

void Trainer::setup_callbacks(const std::vector<CallbackPtr>& callbacks,
                              const std::vector<MonitorPtr>& monitors) {
  for (const auto& cb : callbacks) {
    if (!cb) throw std::invalid_argument("Trainer::setup_callbacks: a callback is null");
    if (dynamic_cast<const MonitorBase*>(cb.get()) != nullptr) {
      throw std::invalid_argument(fmt::format(
          "Trainer::setup_callbacks: {} is a monitor, but was passed in 'callbacks'; pass it in "
          "'monitors' instead",
          cb->name()));
    }
  }
  for (const auto& m : monitors) {
    if (!m) throw std::invalid_argument("Trainer::setup_callbacks: a monitor is null");
  }
  for (const auto& cb : registered_) {
    if (dynamic_cast<const MonitorBase*>(cb.get()) != nullptr) {
      throw std::invalid_argument("Monitor cannot be pre-registered for now!");
    }
  }
  call_once(setup_callbacks_called_, "setup_callbacks");

  graph_.add_variable(
      "global_step", [this] { return static_cast<double>(global_step_); },
      [this](double v) { global_step_ = static_cast<int64_t>(v); }, /*is_floating=*/false);

  register_callback(std::make_shared<MaintainStepCounter>());
  for (const auto& cb : callbacks) register_callback(cb);
  std::vector<MonitorPtr> kept;
  if (!is_chief_ && process_group_ && process_group_->distributed()) {
    // The monitors' files and lines are the chief's; the other ranks' Monitors receive nothing.
    if (!monitors.empty()) {
      TP_LOG_INFO("Rank {} is not the chief: its {} monitor(s) are skipped.", rank(),
                  monitors.size());
    }
  } else {
    for (const auto& m : monitors) {
      if (register_callback(m)) kept.push_back(m);
    }
  }
  monitors_ = std::make_shared<Monitors>(kept);
  register_callback(monitors_);
  setup_done_ = true;

  TP_LOG_INFO("Setup callbacks graph ...");
  callbacks_ = std::make_unique<Callbacks>(registered_);
  callbacks_->setup_graph(*this);

  // Work out the per-step dispatch once: who asks for what, and where each answer goes.
  before_run_list_ = callbacks_->dispatch_list(Hook::kBeforeRun);
  after_run_list_ = callbacks_->dispatch_list(Hook::kAfterRun);
  run_args_.assign(before_run_list_.size(), RunArgs());
  after_run_slots_.clear();
  for (Callback* cb : after_run_list_) {
    int slot = -1;
    for (size_t i = 0; i < before_run_list_.size(); ++i) {
      if (before_run_list_[i] == cb) slot = static_cast<int>(i);
    }
    after_run_slots_.push_back(slot);
  }
}

void Trainer::initialize(std::shared_ptr<SessionInit> session_init) {
  call_once(initialize_done_, "initialize");
  if (!setup_done_) {
    throw std::logic_error("Trainer::initialize must be called after setup_callbacks");
  }
  if (!session_init) session_init = std::make_shared<JustCurrentSession>();
  session_init->setup_graph(*this);
  if (is_chief_) {
    if (!session_init->is_noop()) TP_LOG_INFO("Initializing the session ...");
    session_init->run_init(*this);
  } else if (!session_init->is_noop()) {
    TP_LOG_WARN("This is not a chief worker, 'session_init' was ignored!");
  }
  graph_.finalize();
  TP_LOG_INFO("Graph Finalized.");
  _after_initialize();
}

void Trainer::set_process_group(ProcessGroupPtr group) {
  if (setup_callbacks_called_) {
    throw std::logic_error("Trainer::set_process_group must be called before setup_callbacks");
  }
  if (!group) throw std::invalid_argument("Trainer::set_process_group: the group is null");
  process_group_ = std::move(group);
  is_chief_ = process_group_->is_chief();
  stop_vote_ = detail::StopVote(process_group_->world_size());
}

int64_t Trainer::rank() const { return process_group_ ? process_group_->rank() : 0; }
int64_t Trainer::world_size() const { return process_group_ ? process_group_->world_size() : 1; }

template <typename Fn>
void Trainer::run_stoppable(Fn&& hooks) {
  if (!process_group_ || !process_group_->distributed()) {
    hooks();
    return;
  }
  try {
    hooks();
  } catch (const StopTraining& e) {
    stop_vote_.hold(e, rank());
  }
}

bool Trainer::vote_to_stop(int local_signal, bool epoch_end) {
  detail::StopVote::Outcome outcome =
      stop_vote_.vote(*process_group_, local_signal, stop_requested_, epoch_end);
  if (outcome.signal != 0) received_signal_ = outcome.signal;
  if (outcome.stop) throw StopTraining(*outcome.stop);
  if (outcome.requested) stop_requested_ = true;
  return outcome.requested;
}

ResumePoint Trainer::resume_point() const {
  if (loop_started_) return next_;
  if (restored_) return *restored_;
  return ResumePoint{starting_epoch_, 0, global_step_};
}

void Trainer::set_resume_point(ResumePoint point, int64_t saved_steps_per_epoch) {
  if (loop_started_) {
    throw std::logic_error(
        "Trainer::set_resume_point must be called before main_loop (from a SessionInit)");
  }
  if (point.epoch < 1 || point.step_in_epoch < 0 || point.global_step < 0) {
    throw std::invalid_argument(fmt::format(
        "Trainer::set_resume_point: epoch must be >= 1 and step_in_epoch, global_step >= 0; got "
        "epoch {}, step_in_epoch {}, global_step {}",
        point.epoch, point.step_in_epoch, point.global_step));
  }
  if (saved_steps_per_epoch < 0) {
    throw std::invalid_argument(
        fmt::format("Trainer::set_resume_point: saved_steps_per_epoch must be >= 0, got {}",
                    saved_steps_per_epoch));
  }
  restored_ = point;
  saved_steps_per_epoch_ = saved_steps_per_epoch;
  global_step_ = point.global_step;
}

void Trainer::set_starting_global_step(int64_t step) {
  if (loop_started_) {
    throw std::logic_error("Trainer::set_starting_global_step must be called before main_loop");
  }
  if (step < 0) {
    throw std::invalid_argument(
        fmt::format("Trainer::set_starting_global_step: the step must be >= 0, got {}", step));
  }
  starting_global_step_ = step;
  if (!restored_) global_step_ = step;
}

bool Trainer::should_stop() {
  if (process_group_ && process_group_->distributed()) {
    return vote_to_stop(detail::pending_signal(), /*epoch_end=*/false);
  }
  if (int sig = detail::pending_signal()) {  // reported even when a stop was also requested
    received_signal_ = sig;
    throw StopTraining(sig == SIGINT ? std::string("SIGINT (Ctrl-C)") : stop_signal_name(sig));
  }
  return stop_requested_;
}

void Trainer::main_loop(int64_t steps_per_epoch, int64_t starting_epoch, int64_t max_epoch) {
  check_loop_arguments(steps_per_epoch, starting_epoch, max_epoch);
  call_once(main_loop_done_, "main_loop");
  const ResumePoint start = loop_start(steps_per_epoch, starting_epoch);
  if (!restored_ && max_epoch < start.epoch) {
    // Legal (the callbacks' before_train and after_train still run), but rarely meant.
    TP_LOG_WARN(
        "max_epoch={} is below starting_epoch={}: no epoch will run, only before_train and "
        "after_train. Epochs count from starting_epoch to max_epoch inclusive; raise max_epoch "
        "to train.",
        max_epoch, start.epoch);
  }
  loop_started_ = true;
  steps_per_epoch_ = steps_per_epoch;
  starting_epoch_ = start.epoch;
  max_epoch_ = max_epoch;
  epoch_num_ = start.epoch - 1;
  local_step_ = -1;
  next_ = start;

  protect_process_io();
  detail::SignalHandlerScope signals(handle_signals_, stop_signals_);
  try {
    check_same_loop_on_every_rank(steps_per_epoch, max_epoch);
    run_stoppable([&] { callbacks_->before_train(); });
    const bool finished = run_epochs(start);
    // A StopTraining held in the last epoch's end.
    if (finished && stop_vote_.held()) throw StopTraining(*stop_vote_.held());
    finished_ = finished;
    if (finished) TP_LOG_INFO("Training has finished!");
  } catch (const StopTraining& e) {
    log_stop(e);
  } catch (...) {
    TP_LOG_ERROR("Training failed at global_step={}", global_step_);
    report_failure_to_group();
    callbacks_->after_train();
    if (!write_failures_.empty()) TP_LOG_ERROR("Besides: {}", write_failures_.summary());
    throw;
  }
  run_after_train();
  if (!write_failures_.empty()) {
    WriteFailedError error(
        fmt::format("Training ended, but not everything it was to write was written: {}. The "
                    "ERROR lines of the log say more; the files named are missing or out of "
                    "date (free space or fix the permissions of their directory, then resume)",
                    write_failures_.summary()),
        write_failures_.paths(), write_failures_.count());
    report_failure_message(error.what(), /*own_failure=*/true);
    throw error;
  }
}

void Trainer::report_write_failure(const std::string& callback, const std::string& path,
                                   const std::string& error, std::optional<int64_t> global_step) {
  write_failures_.record(callback, path, error, global_step.value_or(global_step_));
}

std::string Trainer::write_failure_summary() const { return write_failures_.summary(); }

void Trainer::check_loop_arguments(int64_t steps_per_epoch, int64_t starting_epoch,
                                   int64_t max_epoch) const {
  if (steps_per_epoch < 0) {
    throw std::invalid_argument(fmt::format(
        "Trainer::main_loop: steps_per_epoch must be >= 0 (0 runs callbacks only), got {}",
        steps_per_epoch));
  }
  if (max_epoch < 0) {
    throw std::invalid_argument(
        fmt::format("Trainer::main_loop: max_epoch must be >= 0, got {}", max_epoch));
  }
  if (starting_epoch < 1) {
    throw std::invalid_argument(
        fmt::format("Trainer::main_loop: starting_epoch must be >= 1 (epochs count from 1), got {}",
                    starting_epoch));
  }
  if (!initialize_done_) {
    throw std::logic_error(
        "Trainer::main_loop must be called after setup_callbacks and initialize");
  }
}

ResumePoint Trainer::loop_start(int64_t steps_per_epoch, int64_t starting_epoch) {
  if (!restored_) {
    if (starting_global_step_) {
      global_step_ = *starting_global_step_;
      TP_LOG_INFO("Starting at epoch {} with global_step {}.", starting_epoch, global_step_);
    }
    return ResumePoint{starting_epoch, 0, global_step_};
  }
  if (starting_epoch != 1 && starting_epoch != restored_->epoch) {
    TP_LOG_WARN(
        "starting_epoch={} was given, but the restored checkpoint continues at epoch {} (step "
        "{} of it, global_step {}). The checkpoint's counters are used.",
        starting_epoch, restored_->epoch, restored_->step_in_epoch, restored_->global_step);
  }
  if (starting_global_step_ && *starting_global_step_ != restored_->global_step) {
    TP_LOG_WARN(
        "starting_global_step={} was given, but the restored checkpoint continues at "
        "global_step {}. The checkpoint's counters are used.",
        *starting_global_step_, restored_->global_step);
  }
  if (saved_steps_per_epoch_ > 0 && steps_per_epoch > 0 &&
      saved_steps_per_epoch_ != steps_per_epoch) {
    const std::string what = fmt::format(
        "Trainer::main_loop: the restored checkpoint was saved by a run of {} steps per epoch, and "
        "this run has {}: its epoch {} (step {} of it) would count other steps.",
        saved_steps_per_epoch_, steps_per_epoch, restored_->epoch, restored_->step_in_epoch);
    if (!allow_changed_input_) {
      throw std::invalid_argument(
          what +
          " Resume with the steps per epoch of the run that saved it (the same data, batch "
          "size and TrainConfig().steps_per_epoch); or continue anyway with "
          "TrainConfig().allow_changed_input(true); or start over in a new directory.");
    }
    TP_LOG_WARN("{} Continuing anyway (allow_changed_input): the epochs count this run's steps.",
                what);
  }
  if (steps_per_epoch > 0 && restored_->step_in_epoch >= steps_per_epoch) {
    throw std::invalid_argument(fmt::format(
        "Trainer::main_loop: the restored checkpoint continues at step {} of epoch {}, but "
        "steps_per_epoch is {}. Resume with the steps_per_epoch of the run that saved it.",
        restored_->step_in_epoch, restored_->epoch, steps_per_epoch));
  }
  global_step_ = restored_->global_step;
  if (restored_->step_in_epoch > 0 || restored_->global_step > 0) {
    TP_LOG_INFO("Resuming at epoch {}, step {} of it (global_step {}).", restored_->epoch,
                restored_->step_in_epoch, global_step_);
  }
  return ResumePoint{restored_->epoch, restored_->step_in_epoch, global_step_};
}

bool Trainer::run_epochs(const ResumePoint& start) {
  for (int64_t epoch = start.epoch; epoch <= max_epoch_; ++epoch) {
    // A stop request starts no new epoch (docs/tensorpack-differences.md #14).
    if (should_stop()) return false;
    if (!run_epoch(epoch, epoch == start.epoch ? start.step_in_epoch : 0)) return false;
  }
  return true;
}

bool Trainer::run_epoch(int64_t epoch, int64_t first_step) {
  const int64_t steps_per_epoch = steps_per_epoch_;
  epoch_num_ = epoch;
  local_step_ = -1;  // until the epoch's first step runs (docs/tensorpack-differences.md #1)
  TP_LOG_INFO("Start Epoch {} ...", epoch);
  run_stoppable([&] { callbacks_->before_epoch(); });
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = first_step; step < steps_per_epoch; ++step) {
    if (should_stop()) return false;
    local_step_ = step;
    run_step();
    next_ = step + 1 < steps_per_epoch ? ResumePoint{epoch, step + 1, global_step_}
                                       : ResumePoint{epoch + 1, 0, global_step_};
    run_stoppable([&] { callbacks_->trigger_step(); });
  }
  if (process_group_ && process_group_->distributed() && steps_per_epoch > first_step) {
    vote_to_stop(0, /*epoch_end=*/true);  // a StopTraining held in the last trigger_step
  }
  run_stoppable([&] { callbacks_->after_epoch(); });
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  TP_LOG_INFO("Epoch {} (global_step {}) finished, time:{}.", epoch, global_step_,
              humanize_time_delta(took.count()));
  run_stoppable([&] { callbacks_->trigger_epoch(); });
  return true;
}

void Trainer::check_same_loop_on_every_rank(int64_t steps_per_epoch, int64_t max_epoch) {
  if (!process_group_ || !process_group_->distributed()) return;
  // Every rank must run the same build and the same steps, or their collectives pair up wrongly
  // and hang; and read the same data, or their shards overlap (another seed orders it otherwise).
  // Each check names the first rank that differs from rank 0, its host, and both values.
  ProcessGroup& group = *process_group_;
  const auto where = [&](int64_t r, const std::string& host) {
    return fmt::format("rank {} (host {})", r, host);
  };
  if (auto d = group.first_difference(
          "build",
          fmt::format("trainpack {} on LibTorch {}", kTrainpackVersion, compat::torch_version()))) {
    throw std::invalid_argument(fmt::format(
        "the ranks run different builds: {} runs {}, {} runs {}; build the program once, with "
        "the same trainpack and LibTorch, for every host",
        where(d->rank, d->host), d->value, where(0, d->chief_host), d->chief_value));
  }
  if (auto d = group.first_difference(
          "loop", fmt::format("steps_per_epoch {}, max_epoch {}", steps_per_epoch, max_epoch))) {
    throw std::invalid_argument(fmt::format(
        "the ranks were given different loops: {} has {}, {} has {}; every rank must run the "
        "same steps_per_epoch and max_epoch",
        where(d->rank, d->host), d->value, where(0, d->chief_host), d->chief_value));
  }
  if (auto d = group.first_difference("data", data_description())) {
    throw std::invalid_argument(fmt::format(
        "the ranks were given different training data: {} reads {}, and {} reads {} (another "
        "seed, data set, size or batch size). Every rank must be given the same dataflow; "
        "ShardData gives each rank its share of it",
        where(d->rank, d->host), d->value, where(0, d->chief_host), d->chief_value));
  }
}

namespace {

// Whether `e`, or an exception nested in it, is a DistributedError: a collective failed because
// of another rank.
bool caused_by_another_rank(const std::exception& e) {
  if (dynamic_cast<const DistributedError*>(&e) != nullptr) return true;
  try {
    std::rethrow_if_nested(e);
  } catch (const std::exception& inner) {
    return caused_by_another_rank(inner);
  } catch (...) {
  }
  return false;
}

}  // namespace

void Trainer::report_failure_to_group() noexcept {
  try {
    throw;
  } catch (const std::exception& e) {
    // Another rank's failure (a DistributedError, maybe nested in a CallbackError): torchrun's
    // error file gets it, the group's record stays the failed rank's own.
    report_failure_message(e.what(), /*own_failure=*/!caused_by_another_rank(e));
  } catch (...) {
    report_failure_message("an exception that is not a std::exception", /*own_failure=*/true);
  }
}

void Trainer::report_failure_message(const std::string& message, bool own_failure) noexcept {
  if (process_group_ && process_group_->distributed()) {
    process_group_->report_failure(message, own_failure);
    return;
  }
  // One process (torchrun --nproc-per-node 1, or any launcher that sets TORCHELASTIC_ERROR_FILE):
  // torchrun's summary shows the error too, not `error_file: <N/A>`.
  std::string file;
  try {
    file = torchrun_error_file_from_environment();
    if (!file.empty()) write_torchrun_error_file(file, message);
  } catch (const std::exception& e) {
    TP_LOG_WARN("Could not write torchrun's error file {}: {}", file, e.what());
  }
}

void Trainer::log_stop(const StopTraining& e) const {
  if (received_signal_ != 0) {  // tensorpack's KeyboardInterrupt line, for either signal
    TP_LOG_INFO("Detected {} and exiting main loop.",
                received_signal_ == SIGINT ? "Ctrl-C" : stop_signal_name(received_signal_));
  } else {
    TP_LOG_INFO("Training was stopped by exception {}.", e.what());
  }
}

void Trainer::run_after_train() {
  callbacks_->after_train();
  if (const uint64_t dropped = console_bytes_dropped(); dropped > 0) {
    TP_LOG_WARN(
        "{} bytes of console output were dropped after the stop signal: stdout or stderr "
        "was not being read (a full pipe). log.log has every line.",
        dropped);
  }
  // A signal that arrived after the last check (last step, last epoch end, after_train) stopped
  // nothing, but the caller still needs to know it to exit with the conventional status.
  if (received_signal_ == 0) received_signal_ = detail::pending_signal();
}

void Trainer::train(const std::vector<CallbackPtr>& callbacks,
                    const std::vector<MonitorPtr>& monitors, int64_t steps_per_epoch,
                    int64_t starting_epoch, int64_t max_epoch,
                    std::shared_ptr<SessionInit> session_init) {
  setup_callbacks(callbacks, monitors);
  initialize(std::move(session_init));
  main_loop(steps_per_epoch, starting_epoch, max_epoch);
}

void Trainer::run_step() {
  if (!train_op_) {
    throw std::logic_error(
        "Please either set Trainer::set_train_op() or provide an implementation of "
        "Trainer::run_step()!");
  }
  hooked_run(train_op_);
}

void Trainer::begin_hooked_run() {
  if (stop_requested_) {
    throw std::logic_error(
        "Trainer::hooked_run called even after a stop was requested in this step; run_step "
        "should check stop_requested() between hooked runs.");
  }
  step_context_.begin_run();
  any_ops_ = false;
  const size_t n = before_run_list_.size();
  size_t i = 0;
  try {
    for (; i < n; ++i) {
      run_args_[i] = before_run_list_[i]->before_run(step_context_);
      const RunArgs& args = run_args_[i];
      for (const std::string& name : args.fetches()) step_context_.request(name);
      any_ops_ = any_ops_ || !args.ops().empty();
    }
  } catch (...) {
    Callbacks::rethrow_named(*before_run_list_[i], Hook::kBeforeRun);
  }
}

void Trainer::fail_missing_fetch(const std::string& name) const {
  std::string who;
  for (size_t i = 0; i < before_run_list_.size(); ++i) {
    for (const auto& f : run_args_[i].fetches()) {
      if (f == name) who = before_run_list_[i]->name();
    }
  }
  std::string published;
  for (const auto& n : step_context_.published_names()) {
    published += published.empty() ? "'" + n + "'" : ", '" + n + "'";
  }
  throw std::invalid_argument(fmt::format(
      "Callback {} asked for the tensor '{}', but the step does not publish it. Names the step "
      "publishes: {}",
      who, name, published.empty() ? "(none)" : published));
}

void Trainer::end_hooked_run() {
  if (!step_context_.all_published()) fail_missing_fetch(step_context_.missing_names().front());
  if (any_ops_) {
    for (size_t i = 0; i < run_args_.size(); ++i) {
      try {
        for (const auto& op : run_args_[i].ops()) op();
      } catch (...) {
        Callbacks::rethrow_named(*before_run_list_[i], Hook::kBeforeRun);
      }
    }
  }
  const size_t n = after_run_list_.size();
  size_t i = 0;
  try {
    for (; i < n; ++i) {
      const int slot = after_run_slots_[i];
      RunValues values(slot >= 0 ? &run_args_[slot] : nullptr, &step_context_);
      after_run_list_[i]->after_run(step_context_, values);
    }
  } catch (...) {
    Callbacks::rethrow_named(*after_run_list_[i], Hook::kAfterRun);
  }
}

}  // namespace trainpack
