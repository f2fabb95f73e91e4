// configure_runtime: the machine settings that make LibTorch training on a CPU fast, in one call
// at the top of main(), before anything with side effects (threads, files): it may execute the
// program again. Why each setting pays, and the measurements: docs/trainer.md, "Runtime settings
// on a CPU".
//
// In this order: the memory check, OMP_WAIT_POLICY, malloc, intra-op threads, OpenBLAS's threads
// (each RuntimeOptions field below says what it does). It logs one line for each ("Threads: ...",
// "BLAS library loaded: ...", "OpenBLAS: ...", "Malloc: ...", "OMP_WAIT_POLICY: ...") to the
// logger as it is when called, at `log_level`; warnings are always WARN.
//
// Errors: std::invalid_argument naming RuntimeOptions and the field for a negative thread count;
// MemoryLimitError (one line naming the limit, its value and the estimate).
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
  // torch::set_num_threads; 0: default_intra_op_threads().
  TORCH_ARG(int, intra_op_threads) = 0;
  // openblas_set_num_threads when the BLAS is OpenBLAS; 0: leave OpenBLAS's own setting. A BLAS
  // that is not OpenBLAS is reported, with the package that replaces it (libopenblas0-pthread).
  TORCH_ARG(int, blas_threads) = 1;
  // mallopt M_MMAP_THRESHOLD 32 MiB and M_TRIM_THRESHOLD 512 MiB (a warning when refused).
  TORCH_ARG(bool, tune_malloc) = true;
  // When OMP_WAIT_POLICY is unset: set it to PASSIVE and execute the program again (execv of
  // /proc/self/exe, same argv), once. A value in the environment (ACTIVE) is respected.
  TORCH_ARG(bool, passive_omp_wait) = true;
  // Log the settings now (RuntimeReport::log() logs them again later, after set_logger_dir).
  TORCH_ARG(bool, log) = true;
  // The level of the settings' lines: DEBUG (not shown by default), or logger::Level::kInfo.
  TORCH_ARG(logger::Level, log_level) = logger::Level::kDebug;
  // Throw MemoryLimitError under `ulimit -v` or `ulimit -d` below the estimate: the address space
  // mapped now, OpenBLAS's buffers, malloc arenas and stacks of the threads,
  // kRuntimeWorkingMemory and job_memory_bytes. No limit: no estimate.
  TORCH_ARG(bool, check_memory_limits) = true;
  // Bytes the job will hold besides the runtime's own (its data set, a large model).
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
