// trainpack_test_programs: the test suite's helper programs in one executable (programs.h). It
// runs the program named by the last component of argv[0], which is how the tests start it
// (through the links the build makes: trainpack_dp_worker ARGS...); by hand, the program's name
// may also come first: `trainpack_test_programs trainpack_dp_worker ARGS...`. Exit status 2 with
// the list of names when neither names one.
#include <cstdio>
#include <cstring>

#include "programs/programs.h"

namespace {

struct Program {
  const char* name;
  int (*main)(int argc, char** argv);
};

constexpr Program kPrograms[] = {
    {"trainpack_resume_child", resume_child_main},
    {"trainpack_dp_worker", dp_worker_main},
    {"trainpack_inference_worker", inference_worker_main},
    {"trainpack_runtime_child", runtime_child_main},
    {"trainpack_timeout_child", timeout_child_main},
    {"trainpack_shell_child", shell_child_main},
    {"trainpack_tracking_child", tracking_child_main},
};

// The program called `name` (a path's last component counts), or nullptr.
const Program* find_program(const char* name) {
  const char* slash = std::strrchr(name, '/');
  const char* base = slash == nullptr ? name : slash + 1;
  for (const Program& program : kPrograms) {
    if (std::strcmp(base, program.name) == 0) return &program;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 1) {
    if (const Program* program = find_program(argv[0])) return program->main(argc, argv);
  }
  if (argc >= 2) {
    // argv[1] becomes the program's argv[0].
    if (const Program* program = find_program(argv[1])) return program->main(argc - 1, argv + 1);
  }
  std::fprintf(stderr,
               "trainpack_test_programs: start it as one of its programs (a link of that "
               "name, or the name as the first argument):");
  for (const Program& program : kPrograms) std::fprintf(stderr, " %s", program.name);
  std::fprintf(stderr, "\n");
  return 2;
}
