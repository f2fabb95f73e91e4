// fashion_mnist: trainpack's main job. A small CNN (model.h) learns Fashion-MNIST (Debian's
// dataset-fashion-mnist) with DataParallelTrainer (SimpleTrainer when it runs alone), launched by
// launch_train_with_config, and the callback list of tensorpack's ResNet example as far as
// trainpack has it:
//   - InferenceRunner on the test set every epoch: ScalarStats("cost") -> validation_cost,
//     ClassificationError("wrong-top1", "val-error-top1"), ("wrong-top5", "val-error-top5");
//   - ModelSaver every epoch (and at the step where SIGINT/SIGTERM stopped training):
//     <logdir>/model-<global_step>.data and the `checkpoint` index (docs/save-load.md);
//   - MinSaver("val-error-top1"): <logdir>/min-val-error-top1.data, a copy of the
//     checkpoint of the epoch with the lowest validation error so far;
//   - ScheduledHyperParamSetter("learning_rate", ...): --lr, then /10 twice (see lr_schedule);
//   - HumanHyperParamSetter("learning_rate"): `learning_rate: 0.01` in <logdir>/hyper.txt sets
//     the learning rate at the next epoch end;
//   - EstimatedTimeLeft, ThroughputTracker (samples/sec);
//   - with --profile-steps A:B, GraphProfiler in EnableCallbackIf: a Chrome trace of each of the
//     global steps A..B, <logdir>/chrome-trace-<step>.json;
//   - EpochSummary (this file): seconds of training and of validation per epoch, minor page
//     faults per step, and the table printed at the end;
// plus the default callbacks (MovingAverageSummary, ProgressBar, MergeAllSummaries,
// RunUpdateOps) and monitors (TFEventWriter, JSONWriter, ScalarPrinter); with COMET_API_KEY set,
// CometMLMonitor too, and with MLFLOW_TRACKING_URI set, MLflowMonitor (the run also goes to Comet
// or to that MLflow tracking server: docs/experiment-tracking.md).
//
// Resuming (--resume, the default): the run found in --logdir continues from its latest valid
// checkpoint (AutoResumeTrainConfig: weights, optimizer, counters, callback states, data
// position), and stats.json is appended to; so running the same command again after a stop, a
// crash or a finished run with a larger --max-epoch continues it. --no-resume starts over and
// moves an existing --logdir aside to <logdir>.<MMDD-HHMMSS>.
//
// At start trainpack::configure_runtime sets the threads, BLAS, malloc and OpenMP settings and says
// which (OMP_WAIT_POLICY is set to PASSIVE by re-executing the program once, unless the
// environment sets it; trainpack/utils/runtime.h). At the end it prints
// the per-epoch table of this run and the final val-error-top1. Exit status:
//   0        the final val-error-top1 is at most --max-val-error, and everything was written;
//   1        that val-error is above --max-val-error or unknown (no epoch finished, an empty
//            validation set, a finished run whose checkpoint holds none), training failed, or
//            --logdir cannot be used (another run holds it, or it holds checkpoints none of which
//            can be resumed: --no-resume moves it aside), or a
//            checkpoint, the best copy, stats.json or the event file could not be written
//            (trainpack::WriteFailedError: training went on, the summary names the files; this
//            wins over the signal statuses when a signal stopped the run too);
//   2        a bad flag or missing data;
//   3        out of memory: an allocation failed, or configure_runtime refused to start under an
//            address-space or data-size limit (ulimit -v, ulimit -d; SGE's h_vmem) below what the
//            job needs (trainpack/utils/runtime.h); one line says which limit and how much;
//   130/143/129/131/138/140  stopped by SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 (the last
//            two: a scheduler's warning before it kills the job, SLURM's --signal): training stops
//            at the next step boundary, a checkpoint of that step is saved, and the log says where
//            it stopped and how to resume. A signal that arrives after the last step of the last
//            epoch stops nothing: the run is complete and gets the verdict above. A closed
//            terminal or pipe (`job | tee log` after the session ended, `job | head`) does not
//            end the run: what cannot be printed is dropped, and log.log keeps every line.
// A finished run run again (nothing left to train) takes its verdict from the val-error-top1 its
// latest checkpoint holds (EpochSummary's state), not from stats.json.
//
// Several processes (docs/distributed.md): the same program runs unchanged under
//   torchrun --standalone --nproc_per_node 2 --no_python --redirects 9:1 --tee 9:1 fashion_mnist
//   ...
// (scripts/train_distributed.sh). Every rank trains on its shard of the training set (ShardData):
// --batch-size is the global batch, split equally (it must be a multiple of the number of ranks),
// so the run is the single-process run with the same flags, up to float rounding. Rank 0, the
// chief, owns --logdir (log.log, checkpoints, stats.json, events), resumes from its checkpoints
// (the others receive its state), runs RunFlags and EpochSummary, and prints the verdict; the other
// ranks print warnings and errors only, and exit with the chief's status. --threads defaults to the
// hardware threads divided by the ranks on this machine; --dist-timeout bounds every collective,
// --join-timeout the wait for the others to join, --heartbeat-timeout the time to notice a lost
// rank. A rank that fails before joining (a flag refused on its host) tells the others, which end
// at once naming it.
//
// Flags are checked before anything runs: `nan`, `inf`, negative seeds, fractions for counts and
// --threads above the hardware threads (unless --oversubscribe) are refused naming the flag
// (flag_checks.h). A resume with another --batch-size or --train-limit than the checkpoint's run is
// refused, one with other epoch lengths, validation images or rates is warned about (run_flags.h).
//
//   fashion_mnist [--max-epoch N] [--batch-size 128] [--lr 0.1] [--data DIR] [--threads 2] ...
//   fashion_mnist --no-resume ...   # start over in --logdir
//   fashion_mnist --help
#include <sys/resource.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "device_flag.h"
#include "flag_checks.h"
#include "model.h"
#include "ranks.h"
#include "run_flags.h"
#include "sample_trace.h"
#include "trainpack/trainpack.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int64_t minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// ---- data ----

// The split as a dataflow of {image [28, 28] float, label} datapoints, the first `limit` images
// only when limit > 0.
std::shared_ptr<trainpack::DataFromList> load_split(const std::string& split,
                                                    const std::string& dir, int64_t limit,
                                                    trainpack::DataFromListOptions options,
                                                    bool with_index = false) {
  auto [images, labels] = trainpack::FashionMnist::read(split, dir);
  const int64_t n = limit > 0 ? std::min(limit, images.size(0)) : images.size(0);
  std::vector<trainpack::Datapoint> points;
  points.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    points.push_back({images[i], labels[i]});
    // --trace-samples: the image's index, a third component that SampleTrace takes off.
    if (with_index) points.back().push_back(torch::scalar_tensor(i, torch::kInt64));
  }
  return std::make_shared<trainpack::DataFromList>(std::move(points), options);
}

// ---- the learning-rate schedule ----

// (0, lr), then lr/10 after 60% of the epochs and lr/100 after 85% (tensorpack's ResNet
// schedule, [(30, 1e-2), (60, 1e-3), (85, 1e-4), (95, 1e-5)] over 100 epochs, shortened). Points
// must increase strictly, so a short run keeps those that fit.
trainpack::ScheduledHyperParamSetter::Schedule lr_schedule(double lr, int64_t max_epoch) {
  trainpack::ScheduledHyperParamSetter::Schedule schedule{{0, lr}};
  for (auto [epoch, value] : {std::pair<int64_t, double>{max_epoch * 6 / 10, lr / 10},
                              std::pair<int64_t, double>{max_epoch * 85 / 100, lr / 100}}) {
    if (epoch > schedule.back().first && epoch < max_epoch) schedule.emplace_back(epoch, value);
  }
  return schedule;
}

// ---- EpochSummary ----

// Times every epoch's training (before_epoch to after_epoch) and its epoch-end callbacks before
// this one (validation), counts minor page faults per training step, puts the learning rate of
// the epoch to the monitors, logs one line per epoch; main() prints its rows at the end. Place it
// after the InferenceRunner: it reads the round's val-error-top1 from the monitors at
// trigger_epoch (NaN in a row when the round put none).
// Its state in a checkpoint is the last val-error-top1 put (`val_error_top1`) and its global_step
// (`val_error_step`): ModelSaver saves after the InferenceRunner at every epoch end, so the
// checkpoint of a finished run holds the final validation error, which is the verdict of a run
// that has nothing left to train (rather than stats.json, which may be damaged or stale).
class EpochSummary : public trainpack::Callback {
 public:
  struct Row {
    int64_t epoch;
    double train_seconds;
    double epoch_end_seconds;
    double faults_per_step;
    double val_error_top1;
    double val_error_top5;
  };
  // A val-error-top1 and the global_step it was computed at.
  struct Measured {
    int64_t step;
    double value;
  };

  const std::vector<Row>& rows() const { return rows_; }
  // The val-error-top1 a restored checkpoint held, if any.
  const std::optional<Measured>& restored() const { return restored_; }

  trainpack::CallbackState state() const override {
    std::optional<Measured> last = restored_;
    const auto& history = trainer().monitors().get_history("val-error-top1");
    if (!history.empty()) last = Measured{history.back().first, history.back().second};
    if (!last) return {};
    return {{"val_error_step", trainpack::state_scalar(last->step)},
            {"val_error_top1", trainpack::state_scalar(last->value)}};
  }
  void load_state(const trainpack::CallbackState& state) override {
    trainpack::check_state_keys(name(), state, {"val_error_step", "val_error_top1"});
    restored_ = Measured{trainpack::state_int(name(), state, "val_error_step"),
                         trainpack::state_double(name(), state, "val_error_top1")};
  }

 protected:
  void _before_epoch() override {
    start_ = Clock::now();
    start_step_ = global_step();
    start_faults_ = minor_faults();
  }
  void _after_epoch() override {
    train_seconds_ = seconds_since(start_);
    const int64_t steps = global_step() - start_step_;
    faults_per_step_ =
        steps > 0 ? static_cast<double>(minor_faults() - start_faults_) / static_cast<double>(steps)
                  : 0.0;
    end_of_training_ = Clock::now();
  }
  void _trigger_epoch() override {
    // The learning rate this epoch used (the setters after this callback may change it now), as
    // tensorpack's ResNet example summarises it.
    trainer().monitors().put_scalar("learning_rate", graph().variable("learning_rate").get());
    Row row{epoch_num(),      train_seconds_,           seconds_since(end_of_training_),
            faults_per_step_, latest("val-error-top1"), latest("val-error-top5")};
    rows_.push_back(row);
    TP_LOG_INFO(
        "[EpochSummary] epoch {}: {:.1f} s training, {:.1f} s validation, "
        "{:.1f} minor page faults per step",
        row.epoch, row.train_seconds, row.epoch_end_seconds, row.faults_per_step);
  }

 private:
  // The value put at this step, or NaN (never a number a verdict could pass with).
  double latest(const std::string& name) const {
    const auto& history = trainer().monitors().get_history(name);
    if (history.empty() || history.back().first != global_step()) return std::nan("");
    return history.back().second;
  }

  Clock::time_point start_, end_of_training_;
  int64_t start_step_ = 0;
  int64_t start_faults_ = 0;
  double train_seconds_ = 0;
  double faults_per_step_ = 0;
  std::vector<Row> rows_;
  std::optional<Measured> restored_;
};

// ---- a finished run ----

// The verdict of a run that has nothing left to train: the val-error-top1 its checkpoint holds
// (EpochSummary's state), computed at the checkpoint's global_step. A checkpoint without it (saved
// by an older version of this program) falls back to stats.json, saying so, and only when
// stats.json is valid and its last val-error-top1 is of the checkpoint's global_step. nullopt,
// with the reason logged, when neither gives it.
std::optional<double> finished_run_error(const EpochSummary& summary, int64_t checkpoint_step,
                                         const std::string& checkpoint, const std::string& logdir) {
  if (const auto& restored = summary.restored()) {
    if (restored->step == checkpoint_step) {
      TP_LOG_INFO("fashion_mnist: its final val-error-top1 (checkpoint {}) is {:.4f}", checkpoint,
                  restored->value);
      return restored->value;
    }
    TP_LOG_ERROR(
        "fashion_mnist: checkpoint {} (global_step {}) holds a val-error-top1 of global_step {} "
        "only: the validation of its last epoch did not finish, so there is no final "
        "val-error-top1.",
        checkpoint, checkpoint_step, restored->step);
    return std::nullopt;
  }
  const std::string path = logdir + "/stats.json";
  TP_LOG_WARN(
      "fashion_mnist: checkpoint {} holds no val-error-top1 (saved by an older version of this "
      "program); the verdict comes from {} instead, checked against the checkpoint's global_step "
      "{}.",
      checkpoint, path, checkpoint_step);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    TP_LOG_ERROR("fashion_mnist: cannot read {}, so there is no final val-error-top1.", path);
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  const trainpack::ParsedStats parsed = trainpack::parse_stats_file(text.str());
  if (parsed.status == trainpack::ParsedStats::Status::kMalformed) {
    TP_LOG_ERROR(
        "fashion_mnist: {} is not a valid stats file ({}), so there is no final "
        "val-error-top1.",
        path, parsed.message);
    return std::nullopt;
  }
  auto number = [](const trainpack::StatValue& v) {
    return std::visit([](auto x) { return static_cast<double>(x); }, v);
  };
  for (auto it = parsed.entries.rbegin(); it != parsed.entries.rend(); ++it) {
    const trainpack::StatValue* value = it->find("val-error-top1");
    if (value == nullptr) continue;
    const trainpack::StatValue* step = it->find("global_step");
    if (step == nullptr || number(*step) != static_cast<double>(checkpoint_step)) {
      TP_LOG_ERROR(
          "fashion_mnist: the last val-error-top1 in {} is of global_step {}, not of the "
          "checkpoint's {}: stats.json is stale, so there is no final val-error-top1.",
          path, step ? fmt::format("{}", number(*step)) : std::string("(none)"), checkpoint_step);
      return std::nullopt;
    }
    TP_LOG_INFO("fashion_mnist: its final val-error-top1 (stats.json) is {:.4f}", number(*value));
    return number(*value);
  }
  TP_LOG_ERROR("fashion_mnist: {} holds no val-error-top1, so there is no final val-error-top1.",
               path);
  return std::nullopt;
}

// ---- stopping on a signal ----

// Logs where a run stopped by SIGINT/SIGTERM stopped, which checkpoint holds that point (the
// ModelSaver saves one at the stop step, unless that save failed), and how to go on from it.
void log_stop(const trainpack::Trainer& trainer, const trainpack::ModelSaver& saver,
              const std::string& logdir) {
  const std::string name = trainpack::stop_signal_name(trainer.received_signal());
  const int64_t step = trainer.global_step();
  const trainpack::ResumePoint next = trainer.resume_point();
  TP_LOG_INFO(
      "fashion_mnist: stopped by {} at global_step {}; training continues at epoch {}, "
      "step {} of it.",
      name, step, next.epoch, next.step_in_epoch);
  std::optional<trainpack::CheckpointIndex> index;
  try {
    index = trainpack::read_checkpoint_index(saver.checkpoint_dir());
  } catch (const std::exception& e) {
    TP_LOG_ERROR("fashion_mnist: cannot read the checkpoint index: {}", e.what());
  }
  const std::string saved = fmt::format("model-{}", step);
  if (index && index->model_checkpoint_path == saved) {
    TP_LOG_INFO(
        "fashion_mnist: checkpoint {}/{} holds that point. Run the same command again (same "
        "--logdir) to resume from there; --no-resume starts over.",
        saver.checkpoint_dir(), saved);
  } else {
    TP_LOG_ERROR(
        "fashion_mnist: no checkpoint of global_step {} was saved (see the errors above). Running "
        "the same command again resumes from {}.",
        step,
        index ? fmt::format("{}/{}", saver.checkpoint_dir(), index->model_checkpoint_path)
              : fmt::format("the start (no checkpoint in {})", logdir));
  }
}

// The chief's verdict on a run whose training ended without a signal: logs the per-epoch table and
// the final val-error-top1, and returns the exit status (0: at most --max-val-error).
int verdict(const trainpack::Trainer& trainer, const EpochSummary& summary,
            const std::string& resumed_from, const std::string& logdir, int64_t max_epoch,
            double max_val_error, int64_t test_images, double total_seconds) {
  std::optional<double> final_error;
  const auto& restored = trainer.restored_resume_point();
  if (!summary.rows().empty()) {
    // The table and the verdict go to log.log too.
    std::string table = "epoch  train s  valid s  faults/step  val-error-top1  val-error-top5";
    for (const auto& row : summary.rows()) {
      table += fmt::format("\n{:5}  {:7.1f}  {:7.1f}  {:11.1f}  {:14.4f}  {:14.4f}", row.epoch,
                           row.train_seconds, row.epoch_end_seconds, row.faults_per_step,
                           row.val_error_top1, row.val_error_top5);
    }
    TP_LOG_INFO("fashion_mnist: per epoch{}:\n{}",
                resumed_from.empty() ? "" : " (this run; the earlier epochs are in stats.json)",
                table);
    final_error = summary.rows().back().val_error_top1;
    TP_LOG_INFO(
        "fashion_mnist: training took {:.1f} s; final val-error-top1 {:.4f} on {} test "
        "images (limit {:.4f})",
        total_seconds, *final_error, test_images, max_val_error);
  } else if (restored && restored->epoch > max_epoch) {
    // Running the command of a finished run again: nothing to train, and the verdict of that run.
    TP_LOG_INFO(
        "fashion_mnist: the run in {} has finished its {} epochs already (checkpoint {}); nothing "
        "to train. Raise --max-epoch to train more, or pass --no-resume to start over.",
        logdir, restored->epoch - 1, resumed_from);
    final_error = finished_run_error(summary, restored->global_step, resumed_from, logdir);
    if (!final_error) {
      TP_LOG_ERROR(
          "fashion_mnist: FAILED: the final val-error-top1 of the finished run is "
          "unknown (see above)");
      return 1;
    }
  }
  if (!final_error) {
    TP_LOG_ERROR("fashion_mnist: FAILED: no epoch finished, so there is no validation error");
    return 1;
  }
  const double error = *final_error;
  if (std::isnan(error)) {
    TP_LOG_ERROR(
        "fashion_mnist: FAILED: the last epoch put no val-error-top1 (did its validation run?)");
    return 1;
  }
  if (!(error <= max_val_error)) {
    TP_LOG_ERROR(
        "fashion_mnist: FAILED: the final val-error-top1 {:.4f} is above --max-val-error "
        "{:.4f}",
        error, max_val_error);
    return 1;
  }
  TP_LOG_INFO("fashion_mnist: OK");
  return 0;
}

// ---- failing before the group forms ----

// Whether run_main got as far as joining the group; until then, the error it ends with (for the
// ranks that wait for this one: main() hands it to ProcessGroup::report_failure_before_joining,
// so that they end at once naming this rank and the error instead of waiting for the join
// timeout).
bool g_reached_join = false;
std::string g_error_before_joining;
// --join-timeout (main() uses it too: a chief that fails before joining serves the store for the
// others until they have read why, at most this long).
double g_join_timeout_seconds = 120;

// Prints `message` on stderr, keeps it for the other ranks and returns `status`.
int refuse_before_joining(const std::string& message, int status) {
  std::fprintf(stderr, "%s\n", message.c_str());
  g_error_before_joining = message;
  return status;
}

}  // namespace

int run_main(int argc, char** argv) {
  std::string logdir = "train_log/fashion_mnist";
  std::string data_dir = trainpack::kFashionMnistDir;
  int64_t max_epoch = 10;
  int64_t steps_per_epoch = 0;
  int64_t batch_size = 128;
  int64_t val_batch_size = 250;
  double lr = 0.1;
  double weight_decay = 1e-4;
  uint64_t seed = 42;
  int threads = 0;  // 0: default_threads (ranks.h)
  int blas_threads = 1;
  int64_t train_limit = 0;
  int64_t val_limit = 0;
  double max_val_error = 0.10;
  std::string malloc_mode = "tuned";
  bool resume = true;
  bool allow_missing_parameters = false;
  int64_t dist_timeout = 600;
  double heartbeat_timeout = 20;

  bool oversubscribe = false;
  std::string profile_steps;  // "A:B", checked by step_range
  std::string precision_text = "fp32";
  std::string device_text = "cpu";
  bool cuda_graph = false;
  std::string console_file = "INJECT_SHELL.tmp";
  std::string trace_samples;  // "": no trace (sample_trace.h)

  // Bounds said in words; `nan`, `inf`, `-1` for the seed and `1e3` for a count are refused here,
  // naming the flag (flag_checks.h).
  const CLI::Validator kPositive = fashion_mnist::whole_number(1, 1000000000);
  const CLI::Validator kNonNegative = fashion_mnist::whole_number(0, 1000000000);
  CLI::App app{
      "fashion_mnist: trainpack's main job. Trains a small CNN on Fashion-MNIST with "
      "DataParallelTrainer, validates on the test set every epoch, and writes log.log, "
      "stats.json, a TensorBoard event file, checkpoints (model-<step>.data, `checkpoint`) and "
      "the best one (min-val-error-top1.data) into --logdir. Running it again with the same "
      "--logdir continues that run. Under torchrun (scripts/train_distributed.sh) every process "
      "trains on its part of each batch and rank 0 writes --logdir"};
  app.add_option("--logdir", logdir,
                 "Log directory (log.log, stats.json, TensorBoard events, checkpoints; put "
                 "hyper.txt there to change the learning rate during training)")
      ->capture_default_str();
  app.add_flag("--resume,!--no-resume", resume,
               "--resume (the default): continue the run in --logdir from its latest valid "
               "checkpoint (weights, optimizer, counters, callback states, data position), "
               "appending to stats.json; a --logdir without checkpoints starts at step 0. "
               "--no-resume: start over, moving an existing --logdir aside to "
               "<logdir>.<MMDD-HHMMSS>");
  app.add_flag("--allow-missing-parameters", allow_missing_parameters,
               "Resume from a checkpoint that lacks some of the model's parameters (they start "
               "from fresh random weights). Without it such a checkpoint is refused, naming them");
  app.add_option("--data", data_dir,
                 "Directory of the gzipped IDX files (Debian package dataset-fashion-mnist)")
      ->capture_default_str();
  app.add_option("--max-epoch", max_epoch, "Number of epochs")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--steps-per-epoch", steps_per_epoch,
                 "Training steps per epoch; 0: one pass over the training set "
                 "(training images / batch size)")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--batch-size", batch_size,
                 "Training batch size; under torchrun the global batch, split equally over the "
                 "ranks (a multiple of their number)")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--val-batch-size", val_batch_size, "Validation batch size")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--lr", lr,
                 "Initial learning rate (SGD, Nesterov momentum 0.9); divided by 10 after 60% "
                 "of the epochs and by 100 after 85%")
      ->capture_default_str()
      ->check(fashion_mnist::finite_number(0, /*min_inclusive=*/false));
  app.add_option("--weight-decay", weight_decay, "L2 weight decay of SGD")
      ->capture_default_str()
      ->check(fashion_mnist::finite_number(0, /*min_inclusive=*/true));
  app.add_option("--seed", seed, "Seed of the initialisation (torch::manual_seed) and shuffling")
      ->capture_default_str()
      ->check(fashion_mnist::unsigned_number());
  app.add_option("--threads", threads,
                 "Intra-op threads (torch::set_num_threads); default: the number of CPUs, divided "
                 "by the ranks on this machine under torchrun (LOCAL_WORLD_SIZE). They wait with "
                 "OMP_WAIT_POLICY=PASSIVE unless the environment sets it (ACTIVE: spin; about 10% "
                 "faster on an idle machine, about 5 times slower on a busy one)")
      ->check(fashion_mnist::whole_number(1, 1024));
  app.add_flag("--oversubscribe", oversubscribe,
               "Allow --threads above the number of hardware threads (under torchrun: --threads "
               "times the ranks on this machine; each step then waits for threads that share a "
               "core; refused without this flag)");
  app.add_option("--dist-timeout", dist_timeout,
                 "Under torchrun: seconds any collective waits for the other "
                 "ranks before failing; bounds how long the others wait for a rank that hangs (a "
                 "rank that dies is noticed at once)")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--join-timeout", g_join_timeout_seconds,
                 "Under torchrun: seconds a rank waits for the others to join the group (a rank "
                 "that fails before joining with an error is named at once; one that crashed, "
                 "after this)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--heartbeat-timeout", heartbeat_timeout,
                 "Under torchrun: seconds without a heartbeat (sent every 2 s by a thread of each "
                 "rank) after which a rank, or the host of the rendezvous store, counts as lost "
                 "and the group ends (0: no heartbeats, only --dist-timeout)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option(
         "--blas-threads", blas_threads,
         "OpenBLAS threads (openblas_set_num_threads). 1: ATen parallelises around its BLAS "
         "calls already, and OpenBLAS's own threads would compete with those (15 to 40% "
         "slower here); 0: leave OpenBLAS's setting")
      ->capture_default_str()
      ->check(fashion_mnist::whole_number(0, 1024));
  app.add_option("--train-limit", train_limit,
                 "Use only the first N training images; 0: all 60,000")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--val-limit", val_limit, "Use only the first N test images; 0: all 10,000")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--max-val-error", max_val_error,
                 "Exit with status 1 when the final val-error-top1 is above this")
      ->capture_default_str()
      ->check(fashion_mnist::finite_number(0, /*min_inclusive=*/true, 1));
  app.add_option("--malloc", malloc_mode,
                 "tuned: fixed mmap/trim thresholds (mallopt), no page faults per step; default: "
                 "glibc's defaults")
      ->capture_default_str()
      ->check(CLI::IsMember({"tuned", "default"}));
  app.add_option("--profile-steps", profile_steps,
                 "Profile the global steps A to B (inclusive; a run's first step is 1) with "
                 "GraphProfiler: <logdir>/chrome-trace-<step>.json for each, to open in "
                 "https://ui.perfetto.dev or chrome://tracing (docs/looking-inside.md)")
      ->check(fashion_mnist::step_range());
  app.add_option("--precision", precision_text,
                 "fp32, or bf16 (autocast to bfloat16: convolutions and the linear layer in bf16, "
                 "the loss, parameters and optimizer in float32; fastest on a CPU with AVX512_BF16 "
                 "or AMX), or fp16 (float16 with dynamic loss scaling; needs a CUDA GPU; "
                 "docs/mixed-precision.md)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              const auto p = trainpack::parse_precision(text);
              (void)p;  // its device support is checked once --device is known
              return {};
            } catch (const std::invalid_argument& e) {
              return e.what();
            }
          },
          "PRECISION"));
  app.add_option("--device", device_text,
                 "cpu, cuda (cuda:<local rank> under torchrun) or cuda:N; docs/gpu.md")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) { return fashion_mnist::device_flag_error(text); }, "DEVICE"));
  app.add_flag("--cuda-graph", cuda_graph,
               "Capture the training step as a CUDA graph after 3 warm-up steps and replay it "
               "(--device cuda; SGD; docs/gpu.md)");
  app.add_option("--trace-samples", trace_samples,
                 "Directory (existing) where each rank writes the index of every training image "
                 "it reads, one file per process (samples-rank<R>-pid<P>.txt: lines "
                 "\"<pass> <position> <index>\"), to check that the ranks' shares of an epoch "
                 "are a partition of it (docs/distributed.md)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--console-file", console_file,
                 "The file whose appearance pauses training at the next epoch end in the "
                 "training console (InjectShell; its lines are the console's commands without a "
                 "terminal). A relative path is relative to the working directory; only a file "
                 "of this job's user counts (docs/looking-inside.md)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return text.empty() ? "must not be empty" : std::string();
          },
          "PATH"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (app.exit(e) == 0) return 0;
    g_error_before_joining = e.what();
    return 2;
  }
  // Where this process stands among the ranks (none of torchrun's or SLURM's variables: alone).
  trainpack::DistributedEnv env;
  try {
    env = trainpack::DistributedEnv::from_environment();
  } catch (const std::exception& e) {
    return refuse_before_joining(fmt::format("fashion_mnist: error: {}", e.what()), 2);
  }
  if (auto problem = fashion_mnist::batch_size_problem(batch_size, env.world_size)) {
    return refuse_before_joining(fmt::format("fashion_mnist: error: {}", problem->c_str()), 2);
  }
  const unsigned hardware_threads = std::max(1u, std::thread::hardware_concurrency());
  const bool threads_given = threads > 0;
  if (!threads_given)
    threads = fashion_mnist::default_threads(hardware_threads, env.local_world_size);
  if (threads_given && env.local_world_size > 1 &&
      static_cast<int64_t>(threads) * env.local_world_size > hardware_threads && !oversubscribe) {
    return refuse_before_joining(
        fmt::format("--threads: {} on each of the {} ranks on this machine (LOCAL_WORLD_SIZE) is "
                    "more than the {} hardware threads; every step would wait for threads sharing "
                    "a core. Lower --threads (or leave it out: the hardware threads divided by the "
                    "ranks), or pass --oversubscribe to use {} anyway",
                    threads, env.local_world_size, hardware_threads, threads),
        2);
  }
  // The device: checked before anything is loaded, so that a machine without a GPU says so at once.
  c10::Device device(c10::kCPU);
  try {
    device = fashion_mnist::training_device(device_text, env.local_rank);
    trainpack::check_precision_supported(trainpack::parse_precision(precision_text), device,
                                         "--precision");
  } catch (const std::exception& e) {
    return refuse_before_joining(fmt::format("fashion_mnist: error: {}", e.what()), 2);
  }
  if (cuda_graph && !device.is_cuda()) {
    return refuse_before_joining(
        "fashion_mnist: error: --cuda-graph needs a CUDA device (--device cuda); on the CPU the "
        "step runs eager",
        2);
  }
  if (static_cast<unsigned>(threads) > hardware_threads && !oversubscribe) {
    return refuse_before_joining(
        fmt::format(
            "--threads: {} is more than the {} hardware threads of this machine; every step "
            "would wait for threads sharing a core. Lower --threads, or pass "
            "--oversubscribe to use {} anyway",
            threads, hardware_threads, threads),
        2);
  }

  // Threads, BLAS, malloc and OpenMP's waiting (trainpack/utils/runtime.h): before anything
  // large is allocated, and before the log directory is touched, since it may execute the program
  // again. Logged once the log directory is set, so that the lines land in log.log.
  const trainpack::RuntimeReport runtime =
      trainpack::configure_runtime(argc, argv,
                                   trainpack::RuntimeOptions()
                                       .intra_op_threads(threads)
                                       .blas_threads(blas_threads)
                                       .tune_malloc(malloc_mode == "tuned")
                                       // the 70,000 images as read (bytes) and as floats
                                       .job_memory_bytes(int64_t{70000} * 28 * 28 * (1 + 4))
                                       .log(false)
                                       .log_level(trainpack::logger::Level::kInfo));

  // The data first: a missing dataset fails before the log directory is touched.
  std::shared_ptr<trainpack::DataFromList> train_points, test_points;
  try {
    train_points = load_split("train", data_dir, train_limit,
                              trainpack::DataFromListOptions().shuffle(true).seed(seed),
                              /*with_index=*/!trace_samples.empty());
    test_points = load_split("test", data_dir, val_limit, {});
  } catch (const std::exception& e) {
    if (trainpack::is_out_of_memory(e)) {
      return refuse_before_joining(
          fmt::format("fashion_mnist: error: {}", trainpack::describe_out_of_memory(e)),
          trainpack::kOutOfMemoryExitStatus);
    }
    return refuse_before_joining(fmt::format("fashion_mnist: error: {}", e.what()), 2);
  }
  const int64_t train_size = *train_points->size();
  if (train_size < batch_size) {
    return refuse_before_joining(
        fmt::format("fashion_mnist: error: --batch-size {} is larger than the {} training images; "
                    "lower --batch-size or raise --train-limit",
                    batch_size, train_size),
        2);
  }

  // The ranks meet (a group of one when alone). After configure_runtime, which may execute the
  // program again, and before the log directory: when the chief cannot use it, the others hear of
  // it at their first collective instead of waiting for the chief to join.
  trainpack::ProcessGroupPtr group;
  g_reached_join = true;
  const std::chrono::milliseconds heartbeat_ms(static_cast<int64_t>(heartbeat_timeout * 1000));
  try {
    group = trainpack::ProcessGroup::from_environment(
        trainpack::DistributedOptions()
            .timeout(std::chrono::seconds(dist_timeout))
            .join_timeout(
                std::chrono::milliseconds(static_cast<int64_t>(g_join_timeout_seconds * 1000)))
            .heartbeat_timeout(heartbeat_ms)
            .env(env)
            .cuda(device.is_cuda()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: error: cannot join the other ranks: %s\n", e.what());
    return 1;
  }
  const bool chief = group->is_chief();
  // Ends this rank before training with status 1, telling the others why (they fail at their
  // next collective and name this rank).
  auto fail_before_training = [&](const std::string& message) {
    group->report_failure(message);
    return 1;
  };

  // --resume: 'k', keep the directory (its log.log is renamed to log.log.<MMDD-HHMMSS>) and
  // continue what it holds; --no-resume: 'b', a previous run's directory is moved aside, never
  // deleted.
  try {
    // (On a rank other than the chief it only records the name: the directory is the chief's.)
    trainpack::logger::set_logger_dir(logdir, resume ? 'k' : 'b');
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.what());
    return fail_before_training(e.what());
  }

  runtime.log();
  if (group->distributed()) {
    TP_LOG_INFO(
        "fashion_mnist: rank {} of {}; {} intra-op thread(s) per rank{} ({} hardware threads, {} "
        "ranks on this machine)",
        group->rank(), group->world_size(), threads, threads_given ? " (--threads)" : "",
        hardware_threads, env.local_world_size);
  }
  torch::manual_seed(seed);

  // Every rank reads the same seeded order and takes its part of every global batch: the ranks'
  // batches k together are the single-process batch k (ShardData; alone, the whole set).
  const int64_t rank_batch = batch_size / group->world_size();
  trainpack::DataFlowPtr shard =
      std::make_shared<trainpack::ShardData>(train_points, group->rank(), group->world_size());
  if (!trace_samples.empty()) {
    try {
      shard = std::make_shared<fashion_mnist::SampleTrace>(shard, trace_samples, group->rank(),
                                                           group->world_size());
    } catch (const std::exception& e) {
      TP_LOG_ERROR("fashion_mnist: {}", e.what());
      return fail_before_training(e.what());
    }
  }
  auto train = std::make_shared<trainpack::BatchData>(shard, rank_batch);
  auto val =
      std::make_shared<trainpack::BatchData>(test_points, val_batch_size, /*remainder=*/true);
  TP_LOG_INFO(
      "fashion_mnist: {} training images ({} batches of {}{} per epoch), {} validation "
      "images; {} epochs, lr {}, weight decay {}, seed {}",
      train_size, steps_per_epoch > 0 ? steps_per_epoch : *train->size(), batch_size,
      group->distributed()
          ? fmt::format(", {} on each of {} ranks", rank_batch, group->world_size())
          : std::string(),
      *test_points->size(), max_epoch, lr, weight_decay, seed);

  auto model = std::make_shared<fashion_mnist::Model>(lr, weight_decay);
  auto summary = std::make_shared<EpochSummary>();
  // ModelSaver comes right after the InferenceRunner, and MinSaver right after it. tensorpack's
  // examples put ModelSaver first (before the InferenceRunner); here the checkpoint of an epoch is
  // taken once its val-error-top1 is known, so that MinSaver's state in it includes that value
  // (MinSaver's `pending_*` state, callbacks/min_saver.h): with ModelSaver first, a run resumed
  // from the checkpoint of its best epoch would forget that epoch and let a worse later one
  // replace min-val-error-top1. ModelSaver saves every epoch, keeping the last 10 (and one every
  // half hour), and at the step where SIGINT/SIGTERM stopped training (save_on_signal).
  auto saver = std::make_shared<trainpack::ModelSaver>();
  std::vector<trainpack::CallbackPtr> callbacks{
      std::make_shared<trainpack::InferenceRunner>(
          val,
          std::vector<trainpack::InferencerPtr>{
              std::make_shared<trainpack::ScalarStats>("cost"),
              std::make_shared<trainpack::ClassificationError>("wrong-top1", "val-error-top1"),
              std::make_shared<trainpack::ClassificationError>("wrong-top5", "val-error-top5")}),
      saver,
      std::make_shared<trainpack::MinSaver>("val-error-top1"),
      summary,
      // The flags in every checkpoint: a resume with another batch size or other training images
      // is refused, one with other epochs, validation images or rates is warned about.
      std::make_shared<fashion_mnist::RunFlags>(fashion_mnist::RunFlagValues{
          train_size, batch_size, steps_per_epoch > 0 ? steps_per_epoch : *train->size(),
          *test_points->size(), lr, weight_decay, static_cast<int64_t>(seed),
          trainpack::precision_name(trainpack::parse_precision(precision_text))}),
      std::make_shared<trainpack::ScheduledHyperParamSetter>("learning_rate",
                                                             lr_schedule(lr, max_epoch)),
      std::make_shared<trainpack::HumanHyperParamSetter>("learning_rate"),
      std::make_shared<trainpack::EstimatedTimeLeft>(),
      std::make_shared<trainpack::ThroughputTracker>(static_cast<double>(batch_size)),
      // GPUUtil/<device> every epoch on a machine with NVIDIA's driver; elsewhere one warning
      // saying why, and nothing else (docs/looking-inside.md).
      std::make_shared<trainpack::GPUUtilizationTracker>(),
      // `touch INJECT_SHELL.tmp` (--console-file; in the working directory) pauses training at
      // the next epoch end in a console: statistics, the learning rate, save now, stop
      // (docs/looking-inside.md).
      std::make_shared<trainpack::InjectShell>(console_file),
  };
  if (!profile_steps.empty()) {
    // EnableCallbackIf decides in before_run, where global_step is still the previous step's.
    const auto [first, last] = fashion_mnist::parse_step_range(profile_steps);
    callbacks.push_back(std::make_shared<trainpack::EnableCallbackIf>(
        std::make_shared<trainpack::GraphProfiler>(),
        [first = first, last = last](const trainpack::EnableCallbackIf& self) {
          return self.global_step() + 1 >= first && self.global_step() + 1 <= last;
        }));
  }
  // The job checks its own flags against the checkpoint's before this point, naming each flag
  // (--batch-size, --train-limit); the library's check of the input is then redundant.
  trainpack::TrainConfig config = trainpack::TrainConfig()
                                      .model(model)
                                      .callbacks(callbacks)
                                      .max_epoch(max_epoch)
                                      .allow_changed_input(true);
  if (device.is_cuda()) {
    // On a GPU the batches are prefetched on QueueInput's thread into pinned memory and copied a
    // step ahead on a side stream (docs/gpu.md); on the CPU, launch_train_with_config's
    // QueueInput alone.
    config.data(
        std::make_shared<trainpack::StagingInput>(std::make_shared<trainpack::QueueInput>(train)));
  } else {
    config.dataflow(train);
  }
  if (steps_per_epoch > 0) config.steps_per_epoch(steps_per_epoch);
  config.precision(trainpack::parse_precision(precision_text));
  if (cuda_graph) config.cuda_graph(trainpack::CudaGraphOptions());
  // Experiment tracking (docs/experiment-tracking.md), as other frameworks pick up an installed
  // integration: on the chief, COMET_API_KEY sends the run to Comet (workspace, project and server
  // from COMET_WORKSPACE, COMET_PROJECT_NAME, COMET_URL_OVERRIDE) and MLFLOW_TRACKING_URI sends it
  // to that MLflow tracking server (experiment MLFLOW_EXPERIMENT_NAME, else "Default"). A resumed
  // run continues its experiment and its MLflow run (their ids are in the checkpoint). A variable
  // that is set but cannot be used (no workspace, a file: URI) ends the job before training with
  // the reason: a run its user asked to track is not run untracked.
  std::vector<trainpack::MonitorPtr> tracking;
  try {
    if (const char* key = std::getenv("COMET_API_KEY"); chief && key != nullptr && *key != '\0') {
      auto comet = std::make_shared<trainpack::CometMLMonitor>();
      TP_LOG_INFO(
          "fashion_mnist: COMET_API_KEY is set: sending the run to Comet (workspace {}, project "
          "{}, at {})",
          comet->workspace(), comet->project_name(), comet->rest_url());
      tracking.push_back(comet);
    }
    if (const char* uri = std::getenv("MLFLOW_TRACKING_URI"); chief && uri != nullptr && *uri) {
      // The run's settings as MLflow params (the learning rate comes from its setter).
      auto mlflow =
          std::make_shared<trainpack::MLflowMonitor>(trainpack::MLflowMonitorOptions().params(
              {{"batch_size", std::to_string(batch_size)},
               {"max_epoch", std::to_string(max_epoch)},
               {"weight_decay", fmt::format("{}", weight_decay)},
               {"seed", std::to_string(seed)},
               {"ranks", std::to_string(group->world_size())}}));
      TP_LOG_INFO(
          "fashion_mnist: MLFLOW_TRACKING_URI is set: sending the run to MLflow at {}, "
          "experiment {}",
          mlflow->tracking_uri(), mlflow->experiment_name());
      tracking.push_back(mlflow);
    }
  } catch (const std::invalid_argument& e) {
    TP_LOG_ERROR("fashion_mnist: {}", e.what());
    return fail_before_training(e.what());
  }
  if (!tracking.empty()) {
    std::vector<trainpack::MonitorPtr> monitors =
        config.monitors() ? *config.monitors() : trainpack::DEFAULT_MONITORS();
    monitors.insert(monitors.end(), tracking.begin(), tracking.end());
    config.monitors(monitors);
  }
  // The run found in --logdir, if any, continues from its latest valid checkpoint (its counters
  // are the truth: docs/tensorpack-differences.md #7); stats.json is appended to. The chief alone
  // looks: the directory is its own (another machine's rank may not even see it), and
  // DataParallelTrainer gives every rank the state the chief restored.
  std::string resumed_from;
  if (resume && chief) {
    std::optional<trainpack::AutoResumeTrainConfig> auto_resume;
    try {
      auto_resume.emplace(config, trainpack::AutoResumeOptions().allow_missing_parameters(
                                      allow_missing_parameters));
    } catch (const trainpack::AutoResumeError& e) {
      // Nothing in --logdir can be resumed, and training here would overwrite what is there.
      TP_LOG_ERROR("fashion_mnist: {}", e.what());
      TP_LOG_ERROR(
          "fashion_mnist: pass --no-resume to move {} aside to {}.<MMDD-HHMMSS> and start over, "
          "or use another --logdir.",
          logdir, logdir);
      return fail_before_training(e.what());
    }
    resumed_from = auto_resume->found_checkpoint();
    config = *auto_resume;
    if (resumed_from.empty()) {
      TP_LOG_INFO("fashion_mnist: no checkpoint in {}; training starts at step 0.", logdir);
    } else {
      TP_LOG_INFO(
          "fashion_mnist: continuing the run in {} from checkpoint {} (--no-resume starts over).",
          logdir, resumed_from);
    }
  }

  const auto start = Clock::now();
  // Alone (a group of one), DataParallelTrainer trains exactly as SimpleTrainer.
  trainpack::DataParallelTrainer trainer(group, {}, device);
  try {
    trainpack::launch_train_with_config(config, trainer);
  } catch (const trainpack::WriteFailedError& e) {
    // Checkpoints or statistics were not written: never a success, whatever the val-error. (Only
    // the chief writes them; training ended together, so every rank takes this status.)
    if (trainer.received_signal() != 0 && !trainer.finished()) log_stop(trainer, *saver, logdir);
    TP_LOG_ERROR("fashion_mnist: FAILED: {}", e.what());
    return fashion_mnist::share_chief_status(*group, 1);
  } catch (const std::exception& e) {
    const bool out_of_memory = trainpack::is_out_of_memory(e);
    TP_LOG_ERROR("fashion_mnist: training failed: {}", out_of_memory
                                                           ? trainpack::describe_out_of_memory(e)
                                                           : trainpack::describe_exception(e));
    // The trainer reports a failure during training to the other ranks; this also covers one
    // before it (setting up the callbacks), so that their error names this rank.
    group->report_failure(
        e.what(),
        /*own_failure=*/dynamic_cast<const trainpack::DistributedError*>(&e) == nullptr);
    if (!resumed_from.empty()) {
      TP_LOG_ERROR(
          "fashion_mnist: this run resumed from {}: resume with the flags of the run that saved "
          "it (--train-limit, --batch-size, --steps-per-epoch, ...), or pass --no-resume to start "
          "over.",
          resumed_from);
    }
    return out_of_memory ? trainpack::kOutOfMemoryExitStatus : 1;
  }
  const double total_seconds = seconds_since(start);
  // Training ended on every rank at the same step. The verdict is the chief's: the others have
  // neither the monitors nor the checkpoints it is made of, and exit with its status.
  if (!chief) return fashion_mnist::share_chief_status(*group, 0);
  if (trainer.received_signal() != 0 && !trainer.finished()) {
    log_stop(trainer, *saver, logdir);
    return fashion_mnist::share_chief_status(
        *group, trainpack::exit_code_for_signal(trainer.received_signal()));
  }
  if (trainer.received_signal() != 0) {
    // It came after the last step: it stopped nothing, and the run is complete.
    TP_LOG_INFO("fashion_mnist: {} arrived after the last epoch had finished; the run is complete.",
                trainpack::stop_signal_name(trainer.received_signal()));
  }
  return fashion_mnist::share_chief_status(
      *group, verdict(trainer, *summary, resumed_from, logdir, max_epoch, max_val_error,
                      *test_points->size(), total_seconds));
}

// An exception that escapes run_main (a log directory that cannot be made, a failure outside the
// training loop) ends the program with its whole chain on stderr and status 1, not an abort; a
// failed allocation or configure_runtime's MemoryLimitError with one line and status 3. A rank
// that ends with an error before it joined the group tells the ranks waiting for it (under
// torchrun or SLURM; nothing when alone).
int main(int argc, char** argv) {
  int status = 1;
  try {
    status = run_main(argc, argv);
  } catch (const std::exception& e) {
    if (trainpack::is_out_of_memory(e)) {
      g_error_before_joining =
          fmt::format("fashion_mnist: error: {}", trainpack::describe_out_of_memory(e));
      std::fprintf(stderr, "%s\n", g_error_before_joining.c_str());
      status = trainpack::kOutOfMemoryExitStatus;
    } else {
      trainpack::print_exception(e);
      g_error_before_joining = e.what();
    }
  }
  if (status != 0 && !g_reached_join) {
    trainpack::ProcessGroup::report_failure_before_joining(
        g_error_before_joining.empty() ? fmt::format("exited with status {}", status)
                                       : g_error_before_joining,
        trainpack::DistributedOptions().join_timeout(
            std::chrono::milliseconds(static_cast<int64_t>(g_join_timeout_seconds * 1000))));
  }
  return status;
}
