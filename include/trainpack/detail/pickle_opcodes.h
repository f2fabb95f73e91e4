// The opcodes of Python's pickle (protocols 0 to 5) and how each one's argument is laid out, as
// Python's pickletools describes them (Lib/pickletools.py). Shared by the walks of
// trainpack/utils/pickle_check.h and pickle_tensors.h; not for users.
#pragma once

namespace trainpack {
namespace detail {

// How an opcode's argument is laid out (pickletools' ArgumentDescriptor, reduced to its size).
enum class Arg {
  kNone,     // no argument
  kFixed,    // `fixed` bytes
  kLength,   // a little-endian length of `fixed` bytes, then that many bytes
  kLine,     // bytes up to and including a newline
  kTwoLines  // two such lines (GLOBAL, INST)
};

struct Opcode {
  const char* name = nullptr;  // nullptr: not an opcode
  Arg arg = Arg::kNone;
  int fixed = 0;
};

// The opcode of byte `code` (its name nullptr when no opcode has that byte).
const Opcode& pickle_opcode(unsigned char code);

}  // namespace detail
}  // namespace trainpack
