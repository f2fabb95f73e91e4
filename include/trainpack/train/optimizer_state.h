// Forwarding header. trainpack/train/optimizer_state.h moved to trainpack/core/optimizer_state.h
// (OptimizerRestore); this header forwards to it so that existing code keeps compiling, and will be
// removed in a later release. Include "trainpack/core/optimizer_state.h" (or
// "trainpack/trainpack.h") instead.
//
// Including it prints a note naming the new path. Under GCC a #pragma message is informational,
// never a warning (so never an error under -Werror); clang reports it as a warning
// (-W#pragma-messages), so there the note is printed only when TRAINPACK_MOVED_HEADER_MESSAGES is
// defined. TRAINPACK_NO_MOVED_HEADER_MESSAGES silences it under every compiler.
#pragma once

#if !defined(TRAINPACK_NO_MOVED_HEADER_MESSAGES) && \
    (!defined(__clang__) || defined(TRAINPACK_MOVED_HEADER_MESSAGES))
#pragma message( \
    "trainpack/train/optimizer_state.h is deprecated: include trainpack/core/optimizer_state.h (this forwarding header will be removed in a later release)")
#endif

#include "trainpack/core/optimizer_state.h"  // trainpack-moved-header
