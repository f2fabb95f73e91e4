// The program that runtime_test.cpp runs: prints a line when it starts (so the test sees how many
// times it was executed), calls configure_runtime, then prints what it found.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainpack/utils/runtime.h"

int main(int argc, char** argv) {
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
