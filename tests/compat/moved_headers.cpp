// Code written against the header paths that moved to trainpack/core/ still compiles, links and
// runs: this file includes every forwarding header left at an old path (and nothing else of
// trainpack), names what each one used to declare, and trains a NoOpTrainer for one epoch of two
// steps. It is built as user code is, with the project's warnings (-Werror under
// TRAINPACK_WERROR) and neither TRAINPACK_MOVED_HEADER_MESSAGES nor
// TRAINPACK_NO_MOVED_HEADER_MESSAGES: under GCC, each include prints a note, and the build must not
// fail on it. tests/moved_headers_test.cpp checks that this file includes every forwarding header.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <type_traits>

#include "trainpack/callbacks/base.h"
#include "trainpack/callbacks/callback_state.h"
#include "trainpack/callbacks/group.h"
#include "trainpack/callbacks/monitor_base.h"
#include "trainpack/exceptions.h"
#include "trainpack/graph.h"
#include "trainpack/session_init.h"
#include "trainpack/train/distributed.h"
#include "trainpack/train/optimizer_state.h"
#include "trainpack/train/resume_point.h"
#include "trainpack/train/state.h"
#include "trainpack/train/step_context.h"
#include "trainpack/train/tower_registry.h"
#include "trainpack/train/trainer.h"

static_assert(std::is_polymorphic_v<trainpack::Callback>);
static_assert(std::is_base_of_v<trainpack::Callback, trainpack::ProxyCallback>);
static_assert(std::is_base_of_v<trainpack::Callback, trainpack::CallbackFactory>);
static_assert(std::is_class_v<trainpack::Callbacks>);
static_assert(std::is_base_of_v<trainpack::Callback, trainpack::MonitorBase>);
static_assert(std::is_base_of_v<trainpack::Callback, trainpack::Monitors>);
static_assert(std::is_same_v<decltype(trainpack::state_scalar(int64_t{1})), at::Tensor>);
static_assert(std::is_class_v<trainpack::StepContext>);
static_assert(std::is_class_v<trainpack::TowerRegistry>);
static_assert(std::is_base_of_v<trainpack::Trainer, trainpack::NoOpTrainer>);
static_assert(std::is_class_v<trainpack::RestoreOptions>);
static_assert(std::is_same_v<decltype(trainpack::ResumePoint::global_step), int64_t>);
static_assert(std::is_class_v<trainpack::OptimizerRestore>);
static_assert(std::is_class_v<trainpack::DistributedEnv>);
static_assert(std::is_base_of_v<trainpack::SessionInit, trainpack::SaverRestore>);
static_assert(std::is_base_of_v<std::runtime_error, trainpack::StopTraining>);
static_assert(std::is_class_v<trainpack::Graph>);

int main() {
  try {
    trainpack::NoOpTrainer trainer;
    trainer.train({}, {}, /*steps_per_epoch=*/2, /*starting_epoch=*/1, /*max_epoch=*/1);
    if (trainer.global_step() != 2) {
      std::fprintf(stderr, "moved_headers: FAILED: global_step=%lld (expected 2)\n",
                   static_cast<long long>(trainer.global_step()));
      return 1;
    }
    std::printf("moved_headers: OK: the old header paths compile, link and train\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moved_headers: FAILED with an exception: %s\n", e.what());
    return 1;
  }
}
