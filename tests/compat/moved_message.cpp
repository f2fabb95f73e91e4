// Compiled with -fsyntax-only by ctest (tests/CMakeLists.txt): one forwarding header, whose new
// header needs only the standard library, so that the note it prints (or does not print) can be
// checked without LibTorch's flags.
#include "trainpack/exceptions.h"
