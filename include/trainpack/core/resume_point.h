// ResumePoint: where training continues (what a checkpoint's trainer/* entries hold).
#pragma once

#include <cstdint>

namespace trainpack {

// Where training continues: the epoch, the 0-based step in it that runs next, and the global
// step at that point. A checkpoint stores the trainer's resume_point(); a resumed run starts there.
struct ResumePoint {
  int64_t epoch = 1;
  int64_t step_in_epoch = 0;
  int64_t global_step = 0;
};

}  // namespace trainpack
