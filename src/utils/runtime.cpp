#include "trainpack/utils/runtime.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <set>
#include <stdexcept>
#include <thread>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include "trainpack/utils/logger.h"
#include "trainpack/utils/print_exception.h"
#include "trainpack/utils/process_io.h"

namespace trainpack {
namespace {

// glibc's largest accepted mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX), and a trim
// threshold far above a training step's working set.
constexpr int kMmapThreshold = 32 * 1024 * 1024;
constexpr int kTrimThreshold = 512 * 1024 * 1024;

// OpenBLAS's buffer for one calling thread: the allocation that it retries forever when it fails
// (134221824 bytes, 128 MiB and a page, in the stack of a job hung under ulimit -v; BUFFER_SIZE of
// Debian's OpenBLAS 0.3.21 on x86-64).
constexpr int64_t kOpenBlasBuffer = (int64_t{128} << 20) + 4096;
// What glibc's malloc reserves for the arena of each thread that allocates (HEAP_MAX_SIZE on
// 64-bit: twice the largest mmap threshold).
constexpr int64_t kMallocArena = int64_t{64} << 20;
// The stack of a thread when `ulimit -s` is unlimited (glibc then takes its architecture default).
constexpr int64_t kDefaultThreadStack = int64_t{8} << 20;

// A field of /proc/self/status that is a size ("VmSize", "VmData"), in bytes; -1 when absent.
int64_t proc_status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string prefix = field + ":";
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    try {
      return std::stoll(line.substr(prefix.size())) * 1024;  // "  729548 kB"
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

int64_t mib(int64_t bytes) { return (bytes + (int64_t{1} << 20) - 1) >> 20; }

// "the address-space limit (ulimit -v) is 1200000 KiB" for each of RLIMIT_AS and RLIMIT_DATA that
// is set, joined by "; "; empty when neither is.
std::string memory_limits_text() {
  std::string out;
  for (const auto& [resource, what] : {std::pair<int, const char*>{RLIMIT_AS, "address-space"},
                                       std::pair<int, const char*>{RLIMIT_DATA, "data-size"}}) {
    struct rlimit limit {};
    if (getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) continue;
    out += fmt::format("{}the {} limit (ulimit -{}) is {} KiB", out.empty() ? "" : "; ", what,
                       resource == RLIMIT_AS ? 'v' : 'd', limit.rlim_cur / 1024);
  }
  return out;
}

void check_threads(const char* field, int value) {
  if (value < 0) {
    throw std::invalid_argument(
        fmt::format("RuntimeOptions: {} must be >= 0 (0: {}), got {}", field,
                    std::string(field) == "blas_threads" ? "leave OpenBLAS's setting"
                                                         : "one per hardware thread",
                    value));
  }
}

// Sets OMP_WAIT_POLICY=PASSIVE and executes the program again, unless the environment sets it.
// Returns only when nothing was executed (set already, or execv failed: then with a warning).
void reexec_with_passive_wait(char** argv, RuntimeReport& report) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  setenv(kRuntimeSetWaitPolicyVariable, "1", 1);
  std::fflush(nullptr);  // what was printed so far must not be printed twice
  execv("/proc/self/exe", argv);
  unsetenv("OMP_WAIT_POLICY");
  unsetenv(kRuntimeSetWaitPolicyVariable);
  report.warnings.push_back(
      "could not execute the program again with OMP_WAIT_POLICY=PASSIVE (execv /proc/self/exe "
      "failed); OpenMP threads spin while they wait");
}

std::string tune_malloc(bool tune, RuntimeReport& report) {
  if (!tune) return "glibc malloc, default thresholds (dynamic mmap threshold)";
  // Fixing either threshold also turns off glibc's dynamic adjustment of both.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  if (!mmap_ok || !trim_ok) {
    report.warnings.push_back(fmt::format(
        "mallopt refused M_MMAP_THRESHOLD={} or M_TRIM_THRESHOLD={}; malloc keeps its defaults",
        kMmapThreshold, kTrimThreshold));
    return "glibc malloc, default thresholds (mallopt refused the fixed ones)";
  }
  return fmt::format("glibc malloc, mallopt M_MMAP_THRESHOLD={} MiB, M_TRIM_THRESHOLD={} MiB",
                     kMmapThreshold >> 20, kTrimThreshold >> 20);
}

// The BLAS and LAPACK libraries mapped into the process (LibTorch links libblas.so.3, which
// Debian's alternatives resolve to OpenBLAS or the reference BLAS).
std::vector<std::string> loaded_blas_libraries() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> found;
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string base = path.substr(path.rfind('/') + 1);
    if (base.find("blas") != std::string::npos || base.find("lapack") != std::string::npos) {
      found.insert(path);
    }
  }
  return {found.begin(), found.end()};
}

// OpenBLAS's own thread pool, when OpenBLAS is the BLAS: its functions, looked up at run time
// (they are not part of the BLAS interface that LibTorch links against).
struct OpenBlas {
  int (*get_num_threads)() = nullptr;
  void (*set_num_threads)(int) = nullptr;
  char* (*get_config)() = nullptr;
};

OpenBlas find_openblas() {
  OpenBlas ob;
  ob.get_num_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  ob.set_num_threads =
      reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  ob.get_config = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  return ob;
}

void configure_blas(int blas_threads, RuntimeReport& report) {
  const OpenBlas ob = find_openblas();
  if (blas_threads > 0 && ob.set_num_threads != nullptr) ob.set_num_threads(blas_threads);
  const auto libs = loaded_blas_libraries();
  if (libs.empty()) {
    report.lines.push_back(
        "BLAS: no libblas/liblapack mapped (LibTorch uses its own kernels or MKL)");
  }
  bool openblas = false;
  for (const auto& lib : libs) {
    report.lines.push_back("BLAS library loaded: " + lib);
    if (lib.find("openblas") != std::string::npos) openblas = true;
  }
  if (ob.get_num_threads != nullptr) {
    report.lines.push_back(fmt::format("OpenBLAS: {} thread(s){}; {}", ob.get_num_threads(),
                                       blas_threads > 0
                                           ? fmt::format(" (blas_threads {})", blas_threads)
                                           : std::string(" (its own default; blas_threads 0)"),
                                       ob.get_config != nullptr ? ob.get_config() : ""));
    return;
  }
  if (blas_threads > 0) {
    report.warnings.push_back(
        fmt::format("blas_threads {}: the BLAS is not OpenBLAS; ignored", blas_threads));
  }
  if (!openblas && !libs.empty()) {
    report.warnings.push_back(
        "BLAS: this is not OpenBLAS; training is several times slower. Install it: apt-get "
        "install libopenblas0-pthread");
  }
}

// Throws MemoryLimitError when RLIMIT_AS or RLIMIT_DATA is below the estimate of runtime.h for a
// job of `threads` intra-op threads.
void check_memory_limits(const RuntimeOptions& options, int threads) {
  const OpenBlas ob = find_openblas();
  int64_t blas_per_call = 0;  // OpenBLAS's buffers that one calling thread uses at once
  if (ob.get_num_threads != nullptr) {
    blas_per_call =
        options.blas_threads() > 0 ? options.blas_threads() : std::max(1, ob.get_num_threads());
  }
  struct rlimit stack {};
  const int64_t stack_bytes =
      getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY
          ? static_cast<int64_t>(stack.rlim_cur)
          : kDefaultThreadStack;
  const int64_t blas = threads * blas_per_call * kOpenBlasBuffer;
  const int64_t helpers = (threads - 1) * (kMallocArena + stack_bytes);
  const int64_t extra = blas + helpers + kRuntimeWorkingMemory + options.job_memory_bytes();

  struct Limit {
    int resource;
    char flag;
    const char* what;
    const char* field;
    const char* mapped;
  };
  for (const Limit& l : {Limit{RLIMIT_AS, 'v', "address-space", "VmSize", "mapped"},
                         Limit{RLIMIT_DATA, 'd', "data-size", "VmData", "of data"}}) {
    struct rlimit limit {};
    if (getrlimit(l.resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) continue;
    const int64_t now = proc_status_bytes(l.field);
    if (now < 0) continue;  // no /proc: nothing to estimate from
    const int64_t needed = now + extra;
    const auto have = static_cast<int64_t>(limit.rlim_cur);
    if (have >= needed) continue;
    const int64_t needed_kib = (needed + 1023) / 1024;
    throw MemoryLimitError(fmt::format(
        "configure_runtime: the {} limit (ulimit -{}) is {} KiB, below the {} KiB this job needs "
        "({} MiB {} now + {} MiB for {} thread(s): OpenBLAS's buffers, malloc's arenas, stacks + "
        "{} MiB for a step's tensors{}); under it LibTorch's allocations fail{}. Raise the limit "
        "(ulimit -{} {}; SGE's h_vmem, the scheduler's memory request) or use fewer threads",
        l.what, l.flag, have / 1024, needed_kib, mib(now), l.mapped, mib(blas + helpers), threads,
        mib(kRuntimeWorkingMemory),
        options.job_memory_bytes() > 0
            ? fmt::format(" + {} MiB for the job's data", mib(options.job_memory_bytes()))
            : std::string(),
        blas_per_call > 0 ? " and OpenBLAS waits forever for its buffer" : "", l.flag, needed_kib));
  }
}

// Whether `e` itself is a failed allocation (is_out_of_memory, without the nested causes).
bool is_allocation_failure(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return true;
  if (dynamic_cast<const MemoryLimitError*>(&e) != nullptr) return true;
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  if (torch_error == nullptr) return false;
  const std::string message = torch_error->what_without_backtrace();
  return message.find("DefaultCPUAllocator: can't allocate memory") != std::string::npos ||
         message.find("DefaultCPUAllocator: not enough memory") != std::string::npos;
}

// The innermost failed allocation of the chain of `e`, or null.
const std::exception* innermost_allocation_failure(const std::exception& e) {
  const std::exception* found = is_allocation_failure(e) ? &e : nullptr;
  try {
    std::rethrow_if_nested(e);
  } catch (const std::exception& inner) {
    if (const std::exception* deeper = innermost_allocation_failure(inner)) return deeper;
  } catch (...) {
  }
  return found;
}

}  // namespace

bool is_out_of_memory(const std::exception& e) {
  return innermost_allocation_failure(e) != nullptr;
}

std::string describe_out_of_memory(const std::exception& e) {
  const std::exception* cause = innermost_allocation_failure(e);
  if (cause == nullptr) cause = &e;
  if (dynamic_cast<const MemoryLimitError*>(cause) != nullptr) return cause->what();
  std::string message = exception_message(*cause);
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  const std::string limits = memory_limits_text();
  return "out of memory: " + message + (limits.empty() ? "" : " (" + limits + ")");
}

void RuntimeReport::log() const {
  for (const auto& line : lines) TP_LOG_AT(level, "{}", line);
  for (const auto& warning : warnings) TP_LOG_WARN("{}", warning);
}

int default_intra_op_threads(int hardware, const char* local_world_size) {
  int64_t processes = 1;
  if (local_world_size != nullptr && *local_world_size != '\0') {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(local_world_size, &end, 10);
    if (errno == 0 && *end == '\0' && n > 0) processes = n;
  }
  return static_cast<int>(std::max<int64_t>(1, std::max(1, hardware) / processes));
}

RuntimeReport configure_runtime(int argc, char** argv, const RuntimeOptions& options) {
  protect_process_io();
  check_threads("intra_op_threads", options.intra_op_threads());
  check_threads("blas_threads", options.blas_threads());
  if (options.passive_omp_wait() && (argc < 1 || argv == nullptr || argv[argc] != nullptr)) {
    throw std::invalid_argument(
        "configure_runtime: argv must hold argc arguments followed by a null pointer (pass "
        "main's argc and argv), since the program is executed again with them");
  }
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  const char* local_world_size = std::getenv("LOCAL_WORLD_SIZE");
  const int threads = options.intra_op_threads() > 0
                          ? options.intra_op_threads()
                          : default_intra_op_threads(hardware, local_world_size);
  // Before anything is executed again or allocated: a job that cannot run says so at once.
  if (options.check_memory_limits()) check_memory_limits(options, threads);
  RuntimeReport report;
  report.level = options.log_level();
  if (options.passive_omp_wait()) reexec_with_passive_wait(argv, report);

  const std::string malloc_setting = tune_malloc(options.tune_malloc(), report);

  at::set_num_threads(threads);
  report.lines.push_back(
      fmt::format("Threads: {} intra-op (torch::get_num_threads), {} inter-op, {} hardware{}",
                  at::get_num_threads(), at::get_num_interop_threads(), hardware,
                  options.intra_op_threads() == 0 && threads != std::max(1, hardware)
                      ? fmt::format(" shared by LOCAL_WORLD_SIZE={} processes", local_world_size)
                      : std::string()));

  configure_blas(options.blas_threads(), report);
  report.lines.push_back("Malloc: " + malloc_setting);

  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  report.lines.push_back(fmt::format(
      "OMP_WAIT_POLICY: {}{}", wait_policy != nullptr ? wait_policy : "[not set]",
      std::getenv(kRuntimeSetWaitPolicyVariable) != nullptr
          ? " (set by trainpack::configure_runtime: OpenMP threads sleep while they wait instead "
            "of spinning; OMP_WAIT_POLICY=ACTIVE makes them spin)"
          : ""));
  std::string info = at::get_parallel_info();
  while (!info.empty() && info.back() == '\n') info.pop_back();
  report.lines.push_back("at::get_parallel_info():\n" + info);

  if (options.log()) report.log();
  return report;
}

}  // namespace trainpack
