// trainpack_bench_train: what the trainer costs on a real (small) training step, whether
// QueueInput hides the cost of the data, what validation with InferenceRunner costs, and what
// DataParallelInferenceRunner gains with two CPU replicas.
//
// The model is a small CNN (conv 1->8 3x3, relu, maxpool 2, conv 8->16 3x3, relu, maxpool 2,
// linear 784->10) trained with SGD on Fashion-MNIST-shaped batches ([B, 1, 28, 28] float, [B]
// int64 labels) generated once, in memory, before anything is timed. The validation set is made
// the same way (other random values): `--val-batches` batches of `--val-batch-size`.
//
//
// Timing: steady_clock. A trainer form is timed from the first epoch's before_epoch to the last
// epoch's trigger_epoch, seen by a monitor registered after every other callback: all steps and
// all epoch-end work (summaries, stats.json, event-file flush, the validation round) are inside,
// the setup (building the optimizer, creating the files, starting the thread) and after_train are
// not. After a warm-up run of every form, the forms run interleaved in every rep ((a), (b), (a),
// (b), ...) so that drift in the machine's speed hits them alike; the median rate over the reps
// is reported. Also printed (medians over the reps): operator new calls and minor page faults per
// step, which show what the framework allocates per step on top of LibTorch's own work, `cores`,
// the process's CPU time over the wall time (process-wide counters), and the epoch-end work per
// epoch (trainer forms: from the end of the epoch's last step to the end of its trigger_epoch:
// summaries, stats.json, the event file's flush and fsync, and in (w) the validation round; (v):
// its evaluation). In case `queue`, (e) can reach the slower rate only with `cores` near 2: on a
// machine whose other core is busy with other work, the prefetch thread has nowhere to run and
// (e) falls back to the sum of the two costs. The same holds for (d2) in case `dp`.
//
// The allocator (`--malloc`, default `tuned`): with glibc's default settings, whether a step's
// activation buffers are returned to the OS and faulted back in at the next step depends on the
// heap's layout, which differs from one form to the other and from run to run (measured here:
// 30 or 1,000 minor faults per step for the same form, and up to 20% of the step time), so it
// would be measured instead of the framework. `tuned` fixes the thresholds before anything is
// allocated, with trainpack::configure_runtime's mallopt thresholds (M_MMAP_THRESHOLD 32 MiB,
// M_TRIM_THRESHOLD 512 MiB): buffers stay in the heap and no form faults per step. `default` leaves
// glibc alone.
//
// OpenBLAS (`--blas-threads`, default 1, as the main job): LibTorch's BLAS calls (the linear
// layer) go to OpenBLAS, whose pthread build keeps its own pool of one thread per core, spinning
// for a while after every call. On 2 cores that pool takes the core that a second replica, the
// prefetch thread or ATen's second intra-op thread needs: measured here in case dp, (d2) over
// (d1) went from 1.10 to 1.88 with 1 OpenBLAS thread, and (r1) used 2.00 cores instead of 1.00.
// `--blas-threads N` sets OpenBLAS's threads through configure_runtime (ignored, with a note,
// when the BLAS is not OpenBLAS); 0 leaves OpenBLAS's own setting. The issue-4 figures in
// BENCHMARKS.md were taken before this setting existed, with OpenBLAS's own.
//
// Last lines, for the cases run (`--only` picks the cases, comma-separated, default all four, run
// in the order train, queue, validation, dp; `--skip-queue` drops `queue`), in this order:
//   feed_over_inline=<rate (d) / rate (c)>
//   queue_over_slower=<rate (e) / min(rate (s), rate (t))>   (target >= 0.9)
//   validation_over_bare=<rate (w) / rate (v)>               (target >= 0.99)
//   dp2_over_dp1_speedup=<time (d1) / time (d2)>             (2 CPU replicas against one)
//   dp2_over_runner_threads_speedup=<time (rT) / time (d2)>  (against one replica with T threads)
//   trainer_over_bare=<rate (b) / rate (a)>                  (target >= 0.99)
// so that trainer_over_bare is the very last line whenever `train` runs (the default run).
//
//   trainpack_bench_train [--only train,queue,validation,dp] [--steps N] [--steps-per-epoch M]
//                         [--reps R] [--threads T] [--batch-size B] [--queue-steps Q]
//                         [--skip-queue] [--val-steps V] [--val-batches K]
//                         [--val-batch-size VB] [--dp-passes P] [--blas-threads N]
//                         [--malloc tuned|default]
//   Defaults: --steps 1200 --steps-per-epoch 300 --reps 5 --threads 2 --batch-size 64
//   --queue-steps 400 --val-steps 600 --val-batches 40 --val-batch-size 128 --dp-passes 3
//   --blas-threads 1 --malloc tuned. On 2 cores the default run takes about 5.5 minutes (train
//   1.3, queue 2.6, validation 1.0, dp 0.6); `--only validation,dp` (the validation figures) about
//   1.6. Progress bars go to stderr.
//
// Files: main.cpp (the command line, the allocator, OpenBLAS, the cases in order), one file per
// case (train_case.cpp, queue_case.cpp, validation_case.cpp, dp_case.cpp), common.h/.cpp (the
// model, the data, the counters, the bare loop and the trainer forms they share).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support.h"
#include "train/common.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/runtime.h"

namespace {

void usage(std::FILE* out, const char* argv0) {
  std::fprintf(out,
               "usage: %s [--only train,queue,validation,dp (default: all)] [--steps N (default "
               "1200)] [--steps-per-epoch M (default 300)] [--reps R (default 5)] [--threads T "
               "(default 2)] [--batch-size B (default 64)] [--queue-steps Q (default 400)] "
               "[--skip-queue] [--val-steps V (default 600)] [--val-batches K (default 40)] "
               "[--val-batch-size VB (default 128)] [--dp-passes P (default 3)] [--blas-threads N "
               "(default 1; 0: OpenBLAS's own)] [--malloc tuned|default (default tuned)]\n",
               argv0);
}

// Whole epochs: a step count rounded up to a multiple of the epoch; returns the epochs.
int64_t round_to_epochs(int64_t* steps, int64_t steps_per_epoch) {
  const int64_t epochs = (*steps + steps_per_epoch - 1) / steps_per_epoch;
  *steps = epochs * steps_per_epoch;
  return epochs;
}

}  // namespace

int main(int argc, char** argv) {
  trainpack::bench::Setup setup;
  int64_t blas_threads = 1;
  std::set<std::string> cases = {"train", "queue", "validation", "dp"};
  std::string malloc_mode = "tuned";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--skip-queue") {
      cases.erase("queue");
    } else if (arg == "--only" && i + 1 < argc) {
      cases.clear();
      std::istringstream list(argv[++i]);
      std::string name;
      while (std::getline(list, name, ',')) {
        if (name != "train" && name != "queue" && name != "validation" && name != "dp") {
          std::fprintf(stderr, "--only: unknown case '%s' (train, queue, validation, dp)\n",
                       name.c_str());
          return 2;
        }
        cases.insert(name);
      }
    } else if (arg == "--malloc" && i + 1 < argc) {
      malloc_mode = argv[++i];
      if (malloc_mode != "tuned" && malloc_mode != "default") {
        std::fprintf(stderr, "--malloc: expected 'tuned' or 'default', got '%s'\n",
                     malloc_mode.c_str());
        return 2;
      }
    } else if ((arg == "--steps" || arg == "--steps-per-epoch" || arg == "--reps" ||
                arg == "--threads" || arg == "--batch-size" || arg == "--queue-steps" ||
                arg == "--val-steps" || arg == "--val-batches" || arg == "--val-batch-size" ||
                arg == "--dp-passes" || arg == "--blas-threads") &&
               i + 1 < argc) {
      const std::string text = argv[++i];
      // --blas-threads 0 is allowed: OpenBLAS's own setting.
      const int64_t v = arg == "--blas-threads" && text == "0"
                            ? 0
                            : trainpack::bench::parse_positive(arg.c_str(), text.c_str());
      if (arg == "--steps") setup.steps = v;
      if (arg == "--steps-per-epoch") setup.steps_per_epoch = v;
      if (arg == "--reps") setup.reps = v;
      if (arg == "--threads") setup.threads = v;
      if (arg == "--batch-size") setup.batch_size = v;
      if (arg == "--queue-steps") setup.queue_steps = v;
      if (arg == "--val-steps") setup.val_steps = v;
      if (arg == "--val-batches") setup.val_batches = v;
      if (arg == "--val-batch-size") setup.val_batch_size = v;
      if (arg == "--dp-passes") setup.dp_passes = v;
      if (arg == "--blas-threads") blas_threads = v;
    } else if (arg == "--help" || arg == "-h") {
      usage(stdout, argv[0]);
      return 0;
    } else {
      usage(stderr, argv[0]);
      return 2;
    }
  }
  // The main job's settings, from the library (trainpack/utils/runtime.h), before anything is
  // allocated; OpenMP's waiting is left as the environment has it, and each case sets its own
  // intra-op threads.
  const trainpack::RuntimeReport runtime =
      trainpack::configure_runtime(argc, argv,
                                   trainpack::RuntimeOptions()
                                       .intra_op_threads(static_cast<int>(setup.threads))
                                       .blas_threads(static_cast<int>(blas_threads))
                                       .tune_malloc(malloc_mode == "tuned")
                                       .passive_omp_wait(false)
                                       .log(false));
  if (malloc_mode == "tuned" && !runtime.warnings.empty() &&
      runtime.warnings[0].rfind("mallopt refused", 0) == 0) {
    std::fprintf(stderr, "%s; run with --malloc default\n", runtime.warnings[0].c_str());
    return 1;
  }
  std::string blas = "BLAS not OpenBLAS (--blas-threads ignored)";
  for (const auto& line : runtime.lines) {
    if (line.rfind("OpenBLAS: ", 0) == 0) blas = line.substr(0, line.find(';'));
  }
  setup.epochs = round_to_epochs(&setup.steps, setup.steps_per_epoch);
  setup.queue_epochs = round_to_epochs(&setup.queue_steps, setup.steps_per_epoch);
  setup.val_epochs = round_to_epochs(&setup.val_steps, setup.steps_per_epoch);

  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  setup.batches = trainpack::bench::make_batches(16, setup.batch_size, 0);
  setup.val = trainpack::bench::make_batches(setup.val_batches, setup.val_batch_size, 2);
  setup.list = std::make_shared<trainpack::DataFromList>(setup.batches);
  std::printf("trainpack_bench_train: cases");
  for (const char* c : {"train", "queue", "validation", "dp"}) {
    if (cases.count(c) != 0) std::printf(" %s", c);
  }
  std::printf(", %lld reps, malloc %s, %s\n", static_cast<long long>(setup.reps),
              malloc_mode.c_str(), blas.c_str());

  // The cases run in this order, whatever the order of `--only`.
  const std::pair<const char*, void (*)(const trainpack::bench::Setup&, trainpack::bench::Results&)>
      all_cases[] = {{"train", trainpack::bench::run_train_case},
                     {"queue", trainpack::bench::run_queue_case},
                     {"validation", trainpack::bench::run_validation_case},
                     {"dp", trainpack::bench::run_dp_case}};
  trainpack::bench::Results results;
  for (const auto& [name, run] : all_cases) {
    if (cases.count(name) != 0) run(setup, results);
  }

  std::printf("\n");
  for (const auto& line : results.lines) std::printf("%s\n", line.c_str());
  if (results.trainer_over_bare)
    std::printf("trainer_over_bare=%.4f\n", *results.trainer_over_bare);
  return 0;
}
