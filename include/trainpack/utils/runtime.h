// configure_runtime: the machine settings that make LibTorch training on a CPU fast, in one call
// at the top of main().
//
//   int main(int argc, char** argv) {
//     trainpack::configure_runtime(argc, argv, trainpack::RuntimeOptions().intra_op_threads(2));
//     ...
//   }
//
// What it does, in this order, and logs (one line each, "Threads: ...", "BLAS library loaded:
// ...", "OpenBLAS: ...", "Malloc: ...", "OMP_WAIT_POLICY: ..."):
//   1. OpenMP's waiting (passive_omp_wait): LibTorch's OpenMP threads spin while they wait for
//      work (libgomp's default). On an idle machine that is a little faster, but when another
//      process takes a core a step takes several times as long; with OMP_WAIT_POLICY=PASSIVE they
//      sleep instead. libgomp reads the variable only when it is loaded, before main(), so when
//      it is unset this sets it and executes the program again (execv of /proc/self/exe with the
//      same argv), once; the second start sees it set and goes on. A value already in the
//      environment (ACTIVE to spin) is respected. Call it before anything with side effects
//      (threads, files): the process image is replaced.
//   2. malloc (tune_malloc): with glibc's default, dynamic thresholds, the activation buffers of
//      every step (hundreds of KB to a few MB) are mmap'ed and unmapped, or trimmed from the heap
//      top, and fault back in at the next step (thousands of minor page faults per step of a
//      small CNN). Fixed thresholds (M_MMAP_THRESHOLD 32 MiB, the largest glibc accepts on 64-bit;
//      M_TRIM_THRESHOLD 512 MiB) keep them in the heap. Refused by the allocator (e.g. under a
//      sanitizer): a warning, and the defaults stay.
//   3. intra-op threads (torch::set_num_threads): Debian's LibTorch starts with one; 0 (the
//      default) means one per hardware thread, shared among the processes of this machine when
//      a launcher says how many there are (torchrun's LOCAL_WORLD_SIZE): each gets its share.
//   4. OpenBLAS's threads (blas_threads): ATen already parallelises around its BLAS calls, and
//      OpenBLAS's own threads would compete with those (1, the default, was 15 to 40% faster on
//      a 2-core machine); 0 leaves OpenBLAS's setting. A BLAS that is not OpenBLAS is reported,
//      with the package that replaces it (libopenblas0-pthread), since the reference BLAS is
//      several times slower.
//
// The lines go to the logger as it is when called (stdout; log.log too once the logger directory
// is set), at DEBUG level unless `log_level` asks for another (the main job and the benchmarks
// show them at INFO: their figures depend on these settings); warnings are always WARN. With
// .log(false) nothing is logged, and RuntimeReport::log() logs the same lines later, e.g. after
// logger::set_logger_dir so that they land in log.log.
//
// Before all of that (check_memory_limits), the limits on the process's memory: under an
// address-space limit (`ulimit -v`, which SGE's h_vmem and some SLURM set-ups impose) or a
// data-size limit (`ulimit -d`) below what the job needs, LibTorch's allocations fail, and
// OpenBLAS, which retries a failed allocation of its per-thread buffer forever, hangs at 100% CPU
// before the first step. So the job is refused at once with MemoryLimitError, one line naming the
// limit, its value and what is needed, estimated as
//   the address space mapped now (VmSize; VmData for `ulimit -d`: LibTorch's libraries, mostly)
//   + OpenBLAS's buffer (128 MiB) for each thread that may call it at once (intra-op threads, times
//     OpenBLAS's own threads)
//   + a malloc arena (64 MiB reserved by glibc for each thread that allocates) and a stack
//     (`ulimit -s`) for each intra-op thread besides the calling one
//   + kRuntimeWorkingMemory (64 MiB: the tensors of one step of a small model)
//   + RuntimeOptions::job_memory_bytes (what the job itself will hold: its data set, mostly).
// The buffers are the worst case, every intra-op thread in a BLAS call at once; a program that
// knows it needs less turns the check off with check_memory_limits(false).
// Measured on Debian 12's LibTorch 1.13 with OpenBLAS 0.3.21 (x86-64, 2 hardware threads), the
// main job (examples/fashion_mnist) at 2 threads: 713 MiB mapped at the check (VmSize of
// /proc/self/status; 217 MiB of it VmData); under ulimit -v 1100000 to 1300000 (KiB) it hung in
// OpenBLAS's malloc(134221824) loop before the first step, under 1400000 and 1500000 it failed
// with an allocation error, under 1600000 it trained (VmPeak 1587256 kB without a limit). Its
// estimate, with its 262 MiB of data, is 1399093 KiB: every limit that hung is refused, and none
// under which it trains. No limit (`ulimit -v unlimited`, the usual case) skips the estimate.
//
// Errors: std::invalid_argument naming RuntimeOptions and the field for a negative thread count;
// MemoryLimitError as above.
#pragma once

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/utils/logger.h"

namespace trainpack {

// The intra-op threads of one process when none are asked for: the `hardware` threads
// (std::thread::hardware_concurrency), divided by `local_world_size` (the LOCAL_WORLD_SIZE that
// torchrun sets: the processes it starts on this machine), at least 1. A `local_world_size` that
// is null, empty or not a positive integer divides by 1.
int default_intra_op_threads(int hardware, const char* local_world_size);

struct RuntimeOptions {
  // torch::set_num_threads; 0: default_intra_op_threads() (the hardware threads, divided among
  // the launcher's processes on this machine).
  TORCH_ARG(int, intra_op_threads) = 0;
  // openblas_set_num_threads when the BLAS is OpenBLAS; 0: leave OpenBLAS's own setting.
  TORCH_ARG(int, blas_threads) = 1;
  // Fixed mmap/trim thresholds for glibc's malloc (mallopt).
  TORCH_ARG(bool, tune_malloc) = true;
  // OMP_WAIT_POLICY=PASSIVE, re-executing the program once when the environment does not set it.
  TORCH_ARG(bool, passive_omp_wait) = true;
  // Log the settings now.
  TORCH_ARG(bool, log) = true;
  // The level of the settings' lines: DEBUG (not shown by default), or logger::Level::kInfo.
  TORCH_ARG(logger::Level, log_level) = logger::Level::kDebug;
  // Refuse to start (MemoryLimitError) under `ulimit -v` or `ulimit -d` below the estimate.
  TORCH_ARG(bool, check_memory_limits) = true;
  // Bytes the job will hold besides the runtime's own (its data set, a large model), added to the
  // estimate; 0: only the runtime's.
  TORCH_ARG(int64_t, job_memory_bytes) = 0;
};

// What configure_runtime throws when a memory limit is below the estimate (top of this file).
class MemoryLimitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The estimate's allowance for the working tensors of a step of a small model.
constexpr int64_t kRuntimeWorkingMemory = int64_t{64} << 20;

// The exit status of a program that ran out of memory or was refused by MemoryLimitError (the
// main job's, beside 1 for a failure and 2 for a bad flag): see is_out_of_memory.
constexpr int kOutOfMemoryExitStatus = 3;

// Whether `e`, or an exception nested in it, is a failed allocation: std::bad_alloc,
// c10::OutOfMemoryError, LibTorch's CPU allocator's error ("DefaultCPUAllocator: can't allocate
// memory" / "not enough memory"), or MemoryLimitError.
bool is_out_of_memory(const std::exception& e);

// One line for a failed allocation (is_out_of_memory): the innermost cause's message, without
// LibTorch's backtrace, and the memory limits in force, e.g. "out of memory: DefaultCPUAllocator:
// can't allocate memory: ... (the address-space limit, ulimit -v, is 1200000 KiB)".
std::string describe_out_of_memory(const std::exception& e);

// What configure_runtime set, as the lines it logs.
struct RuntimeReport {
  std::vector<std::string> lines;
  std::vector<std::string> warnings;
  logger::Level level = logger::Level::kDebug;  // of `lines`; RuntimeOptions::log_level
  // Logs the lines (at `level`) and warnings again, e.g. once the logger directory is set.
  void log() const;
};

// Applies `options` as described at the top of this file and returns what it set. `argv` (of
// `argc` arguments, argv[argc] == nullptr) is what the program is executed again with.
RuntimeReport configure_runtime(int argc, char** argv, const RuntimeOptions& options = {});

// The environment variable that the re-executed program finds set to "1" when configure_runtime
// set OMP_WAIT_POLICY (and not the user).
constexpr const char* kRuntimeSetWaitPolicyVariable = "TRAINPACK_SET_OMP_WAIT_POLICY";

}  // namespace trainpack
