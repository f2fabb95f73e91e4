// The program that runtime_test.cpp runs.
//
//   trainpack_runtime_child ARGS...      prints a line when it starts (so the test sees how many
//                                        times it was executed), calls configure_runtime, then
//                                        prints what it found.
//   trainpack_runtime_child --memory-job [--no-check]
//                                        prints "at_start <VmSize KiB> <VmData KiB>", calls
//                                        configure_runtime with 2 intra-op threads (no
//                                        re-execution; --no-check: without check_memory_limits),
//                                        then multiplies matrices on both threads (OpenBLAS takes a
//                                        buffer for each) and prints "ran <VmPeak KiB>". A failed
//                                        allocation or MemoryLimitError: one line on stderr and
//                                        status kOutOfMemoryExitStatus; another error: status 1.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>

#include "trainpack/utils/print_exception.h"
#include "trainpack/utils/runtime.h"

#include "programs/programs.h"

namespace runtime_child {

// A field of /proc/self/status in KiB ("VmSize"), or -1.
long long status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atoll(line.c_str() + field.size() + 1);
  }
  return -1;
}

int memory_job(bool check) {
  std::printf("at_start %lld %lld\n", status_kib("VmSize"), status_kib("VmData"));
  std::fflush(stdout);
  try {
    trainpack::configure_runtime(0, nullptr,
                                 trainpack::RuntimeOptions()
                                     .intra_op_threads(2)
                                     .passive_omp_wait(false)
                                     .check_memory_limits(check)
                                     .log(false));
    const at::Tensor a = at::rand({256, 256});
    at::parallel_for(0, 2, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) at::mm(a, a);
    });
  } catch (const std::exception& e) {
    if (trainpack::is_out_of_memory(e)) {
      std::fprintf(stderr, "trainpack_runtime_child: %s\n",
                   trainpack::describe_out_of_memory(e).c_str());
      return trainpack::kOutOfMemoryExitStatus;
    }
    trainpack::print_exception(e);
    return 1;
  }
  std::printf("ran %lld\n", status_kib("VmPeak"));
  return 0;
}

}  // namespace runtime_child

// The program's main, run by trainpack_test_programs (tests/programs/main.cpp) when it is started
// as trainpack_runtime_child.
int runtime_child_main(int argc, char** argv) {
  using namespace runtime_child;  // NOLINT(google-build-using-namespace): its own helpers
  if (argc >= 2 && std::strcmp(argv[1], "--memory-job") == 0) {
    return memory_job(!(argc >= 3 && std::strcmp(argv[2], "--no-check") == 0));
  }
  std::printf("start\n");
  const trainpack::RuntimeReport report = trainpack::configure_runtime(
      argc, argv, trainpack::RuntimeOptions().intra_op_threads(1).log(false));
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* marker = std::getenv(trainpack::kRuntimeSetWaitPolicyVariable);
  std::string args;
  for (int i = 1; i < argc; ++i) args += std::string(" ") + argv[i];
  std::printf("OMP_WAIT_POLICY=%s marker=%s args=%s\n", policy ? policy : "-",
              marker ? marker : "-", args.c_str());
  for (const auto& line : report.lines) {
    if (line.rfind("OMP_WAIT_POLICY: ", 0) == 0) std::printf("%s\n", line.c_str());
  }
  return 0;
}
