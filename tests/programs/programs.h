// The helper programs that the test suite starts as processes of their own (a child to kill, a
// rank of a group, a program that executes itself again, ...). They are linked into one
// executable, trainpack_test_programs (main.cpp), so that LibTorch's headers are compiled once
// for all of them rather than once each; the build links each program's name to it in the same
// folder (trainpack_resume_child -> trainpack_test_programs), and the tests start it by that name.
// Each entry point is the program's main, with its own argv (argv[0] the name it was started by).
#pragma once

int resume_child_main(int argc, char** argv);      // train/resume_child/main.cpp
int dp_worker_main(int argc, char** argv);         // distributed/dp_worker/main.cpp
int inference_worker_main(int argc, char** argv);  // distributed/inference_worker/main.cpp
int runtime_child_main(int argc, char** argv);     // utils/runtime_child/main.cpp
int timeout_child_main(int argc, char** argv);     // callbacks/timeout_child/main.cpp
int shell_child_main(int argc, char** argv);       // callbacks/shell_child/main.cpp
int tracking_child_main(int argc, char** argv);    // tracking/tracking_child/main.cpp
