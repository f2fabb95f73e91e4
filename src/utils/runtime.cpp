#include "trainpack/utils/runtime.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>
#include <thread>

#include <ATen/Parallel.h>

#include "trainpack/utils/logger.h"
#include "trainpack/utils/process_io.h"

namespace trainpack {
namespace {

// glibc's largest accepted mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX), and a trim
// threshold far above a training step's working set.
constexpr int kMmapThreshold = 32 * 1024 * 1024;
constexpr int kTrimThreshold = 512 * 1024 * 1024;

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

}  // namespace

void RuntimeReport::log() const {
  for (const auto& line : lines) TP_LOG_AT(level, "{}", line);
  for (const auto& warning : warnings) TP_LOG_WARN("{}", warning);
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
  RuntimeReport report;
  report.level = options.log_level();
  if (options.passive_omp_wait()) reexec_with_passive_wait(argv, report);

  const std::string malloc_setting = tune_malloc(options.tune_malloc(), report);

  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  const int threads =
      options.intra_op_threads() > 0 ? options.intra_op_threads() : std::max(1, hardware);
  at::set_num_threads(threads);
  report.lines.push_back(
      fmt::format("Threads: {} intra-op (torch::get_num_threads), {} inter-op, {} hardware",
                  at::get_num_threads(), at::get_num_interop_threads(), hardware));

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
