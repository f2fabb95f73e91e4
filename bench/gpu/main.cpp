// trainpack_bench_gpu: the time per step of the main job's model (examples/fashion_mnist/model.h)
// on one device, by hand and by trainpack, in one run. bench/gpu/run.py runs it together with the
// Python forms (bench/gpu/python_loops.py) and prints the table and the ratios; this program is
// the C++ side:
//
//   build/bench/trainpack_bench_gpu [--device cuda|cpu] [--steps 600] [--warmup 100] [--runs 2]
//       [--forms bare_cpp,trainpack,trainpack_graph] [--batches 64] [--batch-size 128]
//       [--threads T (0: one per hardware thread)]
//
// The forms, each on a fresh model with the same initial weights (torch::manual_seed(42) before
// building it):
//   bare_cpp         the loop a user writes: forward, cross_entropy, zero_grad, backward, step;
//   trainpack        SimpleTrainer through launch_train_with_config: DEFAULT_CALLBACKS()
//                    (MovingAverageSummary, ProgressBar, MergeAllSummaries, RunUpdateOps),
//                    DEFAULT_MONITORS() (TFEventWriter, JSONWriter, ScalarPrinter, writing into a
//                    scratch directory) and the main job's other callbacks that are there during
//                    an epoch: ScheduledHyperParamSetter (one point), HumanHyperParamSetter,
//                    EstimatedTimeLeft, ThroughputTracker, GPUUtilizationTracker, InjectShell.
//                    Left out: InferenceRunner, ModelSaver, MinSaver and the main job's own
//                    EpochSummary and RunFlags, which work at epoch ends only. The tower is the
//                    bare loop's (cross-entropy) plus the moving summary "cost" of the main job's;
//                    the top-1/top-5 errors the main job's tower adds are model work, left out of
//                    both;
//   trainpack_graph  the same with TrainConfig::cuda_graph(CudaGraphOptions()): the step is
//                    captured after 3 eager steps (inside the warm-up) and replayed. On the CPU
//                    the trainer warns once and trains eager; its line then says
//                    graph=eager_fallback.
// The model and optimizer are the main job's: fashion_mnist::Model with SGD, Nesterov momentum
// 0.9, weight decay 1e-4, learning rate 0.01.
//
// The data: `--batches` distinct batches of `--batch-size` random images in [0, 1) and labels in
// [0, 10) (torch::manual_seed(1234), generated on the CPU, so every device and the Python side see
// the same values), moved to the device before anything is timed and cycled through; the trainer
// reads them through FeedInput from a DataFromList, which passes device tensors through.
//
// Timing: steady_clock around the steps warmup+1 .. warmup+steps of one epoch of warmup+steps
// steps, after waiting for the device (torch::cuda::synchronize) at both ends of the window and
// nowhere else. For the trainer forms the window runs from the trigger_step of step `warmup` to
// that of the last step, so every hook of the timed steps is inside; the setup, the epoch's start
// and its end (summaries written, monitors, the progress bar's last line) are not. The forms run
// interleaved: run 1 of every form, then run 2 of every form, and so on. One line per run:
//   result form=<form> run=<k> ms_per_step=<ms> steps=<N> warmup=<W> device=<device>
//          final_loss=<loss> [graph=replayed captures=<n> replays=<n> | graph=eager_fallback]
// (one line; final_loss: the last step's cost, read after the window; the trainer forms give
// the moving average of "cost" that MergeAllSummaries put at the epoch's end). A form that fails
// prints `error form=<form> run=<k> reason=<what>` and the program exits with status 1 after the
// other forms ran.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/forms.h"
#include "support.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/runtime.h"

namespace {

namespace tb = trainpack::bench_gpu;

const std::vector<std::string> kForms = {"bare_cpp", "trainpack", "trainpack_graph"};

struct Options {
  std::string device = "cuda";
  int64_t steps = 600;
  int64_t warmup = 100;
  int64_t runs = 2;
  int64_t batches = 64;
  int64_t batch_size = 128;
  int64_t threads = 0;
  std::vector<std::string> forms = kForms;
};

void usage(std::FILE* out, const char* argv0) {
  std::fprintf(out,
               "usage: %s [--device cuda|cpu (cuda)] [--steps N (600)] [--warmup W (100)] "
               "[--runs R (2)] [--forms bare_cpp,trainpack,trainpack_graph] [--batches K (64)] "
               "[--batch-size B (128)] [--threads T (0: one per hardware thread)]\n",
               argv0);
}

std::vector<std::string> split_forms(const std::string& text, const char* argv0) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string form;
  while (std::getline(in, form, ',')) {
    bool known = false;
    for (const auto& f : kForms) known = known || f == form;
    if (!known) {
      std::fprintf(stderr,
                   "--forms: unknown form '%s' (known: bare_cpp, trainpack, "
                   "trainpack_graph)\n",
                   form.c_str());
      usage(stderr, argv0);
      std::exit(2);
    }
    out.push_back(form);
  }
  if (out.empty()) {
    std::fprintf(stderr, "--forms: empty\n");
    std::exit(2);
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--device" && has_value) {
      o.device = argv[++i];
      if (o.device != "cuda" && o.device != "cpu") {
        std::fprintf(stderr, "--device: cuda or cpu, got '%s'\n", o.device.c_str());
        std::exit(2);
      }
    } else if (a == "--forms" && has_value) {
      o.forms = split_forms(argv[++i], argv[0]);
    } else if ((a == "--warmup" || a == "--threads") && has_value) {
      const std::string text = argv[++i];
      const int64_t v = text == "0" ? 0 : trainpack::bench::parse_positive(a.c_str(), text.c_str());
      (a == "--warmup" ? o.warmup : o.threads) = v;
    } else if ((a == "--steps" || a == "--runs" || a == "--batches" || a == "--batch-size") &&
               has_value) {
      const int64_t v = trainpack::bench::parse_positive(a.c_str(), argv[++i]);
      if (a == "--steps") o.steps = v;
      if (a == "--runs") o.runs = v;
      if (a == "--batches") o.batches = v;
      if (a == "--batch-size") o.batch_size = v;
    } else if (a == "--help" || a == "-h") {
      usage(stdout, argv[0]);
      std::exit(0);
    } else {
      usage(stderr, argv[0]);
      std::exit(2);
    }
  }
  return o;
}

// `count` batches {images [B, 28, 28] float in [0, 1), labels [B] int64 in [0, 10)} from a fixed
// seed, on `device`.
std::vector<trainpack::Datapoint> make_batches(int64_t count, int64_t batch_size,
                                               c10::Device device) {
  torch::manual_seed(1234);
  const at::Tensor images = torch::rand({count, batch_size, 28, 28});
  const at::Tensor labels = torch::randint(10, {count, batch_size}, torch::kLong);
  std::vector<trainpack::Datapoint> out;
  for (int64_t i = 0; i < count; ++i) out.push_back({images[i].to(device), labels[i].to(device)});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  trainpack::configure_runtime(argc, argv,
                               trainpack::RuntimeOptions()
                                   .intra_op_threads(static_cast<int>(o.threads))
                                   .blas_threads(1)
                                   .tune_malloc(true)
                                   .log(false));
  // Warnings only: the trainer's setup and epoch-end lines would bury the result lines.
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  tb::Setup setup;
  if (o.device == "cuda") {
    if (!torch::cuda::is_available()) {
      std::fprintf(stderr,
                   "trainpack_bench_gpu: --device cuda: no CUDA GPU is available to this process "
                   "(a CPU-only LibTorch, no driver, or CUDA_VISIBLE_DEVICES hides every GPU); "
                   "use --device cpu\n");
      return 2;
    }
    setup.device = c10::Device(c10::kCUDA, 0);
  }
  setup.steps = o.steps;
  setup.warmup = o.warmup;
  setup.batch_size = o.batch_size;
  setup.batches = make_batches(o.batches, o.batch_size, setup.device);
  std::printf("info side=cpp device=%s intra_op_threads=%d batches=%lld batch_size=%lld\n",
              setup.device.str().c_str(), at::get_num_threads(), static_cast<long long>(o.batches),
              static_cast<long long>(o.batch_size));
  std::fflush(stdout);

  int status = 0;
  for (int64_t run = 1; run <= o.runs; ++run) {
    for (const std::string& form : o.forms) {
      try {
        const tb::Measured m = form == "bare_cpp" ? tb::run_bare_cpp(setup)
                                                  : tb::run_trainpack(setup, form != "trainpack");
        std::printf(
            "result form=%s run=%lld ms_per_step=%.4f steps=%lld warmup=%lld device=%s "
            "final_loss=%.4f%s\n",
            form.c_str(), static_cast<long long>(run), m.ms_per_step,
            static_cast<long long>(o.steps), static_cast<long long>(o.warmup),
            setup.device.str().c_str(), m.final_loss, m.fields.c_str());
      } catch (const std::exception& e) {
        // One line: the reason is the rest of it.
        std::string reason = e.what();
        for (char& c : reason) {
          if (c == '\n') c = ' ';
        }
        std::printf("error form=%s run=%lld reason=%s\n", form.c_str(), static_cast<long long>(run),
                    reason.c_str());
        status = 1;
      }
      std::fflush(stdout);
    }
  }
  return status;
}
