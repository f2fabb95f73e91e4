// ModelSaver (trainpack/callbacks/saver.h): when it saves, the order of the file operations and
// TensorFlow Saver's retention rules.
#include "trainpack/callbacks/saver.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <regex>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "trainpack/core/state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/detail/model_savers.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/output_dir.h"

namespace trainpack {

namespace fs = std::filesystem;

namespace detail {

std::string saver_dir(const std::optional<std::string>& dir) {
  const std::string d = output_dir_or_logger_dir(dir).value_or("");
  if (d.empty()) return d;
  std::string n = fs::path(d).lexically_normal().string();
  while (n.size() > 1 && n.back() == '/') n.pop_back();
  return n;
}

std::string saver_path(const std::string& dir, const std::string& name) {
  if (fs::path(name).is_absolute()) return name;
  return (fs::path(dir) / name).string();
}

void collect_model_savers(const CallbackPtr& cb, std::vector<ModelSaver*>* out) {
  if (auto* saver = dynamic_cast<ModelSaver*>(cb.get())) out->push_back(saver);
  if (const auto* proxy = dynamic_cast<const ProxyCallback*>(cb.get())) {
    collect_model_savers(proxy->inner(), out);
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// ModelSaver

ModelSaver::ModelSaver(ModelSaverOptions options) : options_(std::move(options)) {
  if (options_.max_to_keep() < 0) {
    throw std::invalid_argument(
        fmt::format("ModelSaver: max_to_keep must be >= 0, got {}", options_.max_to_keep()));
  }
  const double hours = options_.keep_checkpoint_every_n_hours();
  if (!std::isfinite(hours) || hours < 0) {
    throw std::invalid_argument(fmt::format(
        "ModelSaver: keep_checkpoint_every_n_hours must be a number >= 0, got {}", hours));
  }
  if (options_.var_collections().empty()) {
    throw std::invalid_argument(
        "ModelSaver: var_collections is empty (use {\"GLOBAL_VARIABLES\"}: the whole state)");
  }
  for (const auto& c : options_.var_collections()) {
    if (c != "GLOBAL_VARIABLES" && c != "variables") {
      throw std::invalid_argument(fmt::format(
          "ModelSaver: var_collections '{}' is not supported; only \"GLOBAL_VARIABLES\" (the "
          "whole training state) can be saved",
          c));
    }
  }
  dir_ = detail::saver_dir(options_.checkpoint_dir());
  next_keep_time_ = now() + hours * 3600;
}

double ModelSaver::now() const { return read_clock(options_.clock(), wall_seconds); }

void ModelSaver::_setup_graph() {
  if (dir_.empty()) {
    throw std::invalid_argument(
        missing_output_dir_message("ModelSaver", "ModelSaverOptions().checkpoint_dir(dir)"));
  }
  // Created here, not at construction: under data-parallel training the callback is set up on
  // the chief only, and another rank (maybe on another machine) must not create the directory.
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    throw std::runtime_error(fmt::format(
        "ModelSaver: cannot create the checkpoint directory {}: {}", dir_, ec.message()));
  }
  last_saved_step_.reset();
  if (options_.async()) start_writer();
}

// One save, from the snapshot to its outcome.
struct ModelSaver::Save {
  int64_t step = 0;
  std::string name;    // model-<gs>
  std::string prefix;  // <dir>/model-<gs>
  TensorMap state;
  CheckpointIndex index;
  std::vector<std::string> to_delete;  // what retention drops, deleted once the index is durable
  // Committed by finish() when written: the tracked list and the hours rule's state after it.
  std::vector<std::pair<std::string, double>> tracked;
  double next_keep_time = 0;
  double last_preserved = 0;
  // The outcome, set by write(): on failure, the file not written and why.
  bool ok = false;
  std::string failed_path;
  std::string error;
};

namespace {

// The training state as a snapshot: every tensor a copy of its own, so that the optimizer's
// in-place updates after this step (and WithEMAWeights swapping the weights back) do not reach a
// checkpoint that is still being written. collect_training_state shares the parameters' memory
// (checkpoint_form), which a synchronous save may do and an asynchronous one may not.
TensorMap snapshot_training_state(const Trainer& trainer) {
  TensorMap state = collect_training_state(trainer);
  for (auto& entry : state) entry.second = entry.second.clone();
  return state;
}

// What the exception being handled says.
std::string current_exception_message() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

ModelSaver::~ModelSaver() { stop_writer(); }

namespace {

// The checkpoints of a previous run in `dir`: its `checkpoint` index and its `model-<N>.data`
// files, by name, sorted.
std::vector<std::string> previous_checkpoints(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    static const std::regex checkpoint_file(R"(model-[0-9]+\.data)");
    if (name == kCheckpointIndexFile || std::regex_match(name, checkpoint_file)) {
      found.push_back(name);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

void ModelSaver::_before_train() {
  // A run that starts from scratch where another run saved would replace that run's
  // checkpoints of the same steps and its index: refused, unless this run continues from a
  // checkpoint (a restored resume point: AutoResumeTrainConfig, SaverRestore).
  if (!trainer().restored_resume_point()) {
    const std::vector<std::string> found = previous_checkpoints(dir_);
    if (!found.empty()) {
      std::string names;
      for (size_t i = 0; i < found.size() && i < 6; ++i) names += (i ? ", " : "") + found[i];
      if (found.size() > 6) names += fmt::format(" and {} more", found.size() - 6);
      throw std::runtime_error(fmt::format(
          "ModelSaver: {} holds the checkpoints of another run ({}), and this run starts from "
          "scratch: its saves would replace them. To continue that run, resume it "
          "(AutoResumeTrainConfig, or SaverRestore of its latest checkpoint); to start over, use "
          "a new directory, or have the logger move the old one aside first "
          "(logger::set_logger_dir(dir, 'b'); 'd' deletes it).",
          dir_, names));
    }
  }
  if (options_.async()) start_writer();
}

void ModelSaver::start_writer() {
  if (writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = false;
  }
  writer_ = std::thread([this] { writer_loop(); });
}

void ModelSaver::stop_writer() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  // The writer finishes the save it was handed before it stops (writer_loop).
  writer_.join();
}

void ModelSaver::writer_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || (pending_ && !taken_); });
    if (pending_ && !taken_) {
      taken_ = true;
      const std::shared_ptr<Save> save = pending_;
      lock.unlock();
      write(*save);
      lock.lock();
      written_ = true;
      cv_.notify_all();
      continue;
    }
    return;  // stop_, and nothing left to write
  }
}

bool ModelSaver::save() {
  flush();  // at most one save in flight; its outcome decides the tracked list below
  const int64_t gs = trainer().global_step();
  if (last_saved_step_ == gs) return false;
  auto save = std::make_shared<Save>();
  save->step = gs;
  save->name = fmt::format("model-{}", gs);
  save->prefix = detail::saver_path(dir_, save->name);
  const double t = now();

  // The tracked list after this save, and what retention drops from it (TF Saver's rules).
  for (const auto& entry : tracked_) {
    if (entry.first != save->name) save->tracked.push_back(entry);
  }
  save->tracked.emplace_back(save->name, t);
  save->next_keep_time = next_keep_time_;
  save->last_preserved = last_preserved_;
  const auto max_to_keep = static_cast<size_t>(options_.max_to_keep());
  while (max_to_keep > 0 && save->tracked.size() > max_to_keep) {
    const auto dropped = save->tracked.front();
    save->tracked.erase(save->tracked.begin());
    if (dropped.second > save->next_keep_time) {
      save->next_keep_time += options_.keep_checkpoint_every_n_hours() * 3600;
      save->last_preserved = dropped.second;
    } else if (dropped.first != save->name) {
      save->to_delete.push_back(dropped.first);
    }
  }
  save->index.model_checkpoint_path = save->name;
  for (const auto& [n, time] : save->tracked) {
    save->index.all_model_checkpoint_paths.push_back(n);
    save->index.all_model_checkpoint_timestamps.push_back(time);
  }
  save->index.last_preserved_timestamp = save->last_preserved;

  try {
    // The synchronous save writes before training goes on, so it needs no copy.
    save->state =
        options_.async() ? snapshot_training_state(trainer()) : collect_training_state(trainer());
  } catch (const std::exception& e) {
    TP_LOG_ERROR("Exception in ModelSaver! {}", e.what());
    trainer().report_write_failure(name(), save->prefix + ".data", e.what());
    return false;
  }

  if (!options_.async()) {
    write(*save);
    return finish(*save);
  }
  start_writer();  // running since setup_graph, unless after_train stopped it
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ = std::move(save);
    taken_ = false;
    written_ = false;
  }
  cv_.notify_all();
  return true;
}

void ModelSaver::write(Save& save) const {
  const CheckpointWriteOptions write_options = CheckpointWriteOptions().fsync(options_.fsync());
  bool existed = false;
  bool written = false;
  try {
    if (options_.before_write()) options_.before_write()(save.prefix);
    existed = checkpoint_exists(save.prefix);
    write_checkpoint(save.prefix, save.state, write_options);
    written = true;
    write_checkpoint_index(dir_, save.index, write_options);  // last: it makes the save visible
  } catch (...) {
    // Anything, not only std::exception: an exception must not leave the writer thread.
    save.error = current_exception_message();
    TP_LOG_ERROR("Exception in ModelSaver! {}", save.error);
    save.failed_path =
        written ? detail::saver_path(dir_, kCheckpointIndexFile) : save.prefix + ".data";
    // A complete checkpoint that no index names is removed, unless an earlier one of the same
    // name (which some index may name) was replaced by it.
    if (written && !existed) remove_checkpoint(save.prefix);
    save.state.clear();
    return;
  }
  save.state.clear();  // the snapshot's memory goes now, not at the next save
  save.ok = true;
  // Only now that the new checkpoint and the index are durable.
  for (const auto& n : save.to_delete) remove_checkpoint(detail::saver_path(dir_, n));
  TP_LOG_INFO("Model saved to {}.", save.prefix);
}

bool ModelSaver::finish(const Save& save) {
  if (!save.ok) {
    // The run ends with an error naming what was not saved. Reported here, on the training
    // thread: the trainer's record of failures is not synchronised.
    trainer().report_write_failure(name(), save.failed_path, save.error, save.step);
    return false;
  }
  tracked_ = save.tracked;
  next_keep_time_ = save.next_keep_time;
  last_preserved_ = save.last_preserved;
  last_saved_step_ = save.step;
  return true;
}

bool ModelSaver::flush() {
  std::shared_ptr<Save> save;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!pending_) return true;
    cv_.wait(lock, [this] { return written_; });
    save = std::move(pending_);
    pending_.reset();
    taken_ = written_ = false;
  }
  return finish(*save);
}

void ModelSaver::_after_train() {
  flush();  // the save in flight: durable, or its failure reported, before training ends
  const int sig = trainer().received_signal();
  if (options_.save_on_signal() && sig != 0 && last_saved_step_ != trainer().global_step()) {
    TP_LOG_INFO("Saving a checkpoint at global_step={} before exiting on {}.",
                trainer().global_step(), stop_signal_name(sig));
    save();
    flush();
  }
  stop_writer();
}

bool wait_for_model_savers(const Trainer& trainer) {
  std::vector<ModelSaver*> savers;
  for (const auto& cb : trainer.registered_callbacks()) detail::collect_model_savers(cb, &savers);
  bool ok = true;
  for (ModelSaver* saver : savers) ok = saver->flush() && ok;
  return ok;
}

}  // namespace trainpack
