// trainpack's version, as CMake's project(trainpack VERSION ...) gives it (CMake refuses to
// configure when the two differ). Data-parallel ranks compare it, with LibTorch's, before
// training: hosts running different builds are refused with both versions named.
#pragma once

namespace trainpack {

inline constexpr char kTrainpackVersion[] = "0.1.0";

}  // namespace trainpack
