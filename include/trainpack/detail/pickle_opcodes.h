// The opcodes of Python's pickle (protocols 0 to 5) and how each one's argument is laid out, as
// Python's pickletools describes them (Lib/pickletools.py). Shared by the walks of
// trainpack/utils/pickle_check.h and pickle_tensors.h, which decode every argument with
// pickle_argument(); not for users.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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

// A little-endian integer of `n` <= 8 bytes at `p`; sign-extended when `is_signed`.
int64_t pickle_little_endian(const char* p, size_t n, bool is_signed);

// Where an opcode's argument lies in the pickle, and where the next opcode starts.
struct PickleArgument {
  // kFixed: the argument's bytes; kLength: the bytes after the length; kLine, kTwoLines: the
  // first line, without its newline. Empty for kNone.
  const char* data = nullptr;
  size_t size = 0;
  std::string_view second_line;  // kTwoLines: the second line (GLOBAL's attribute name)
  size_t end = 0;                // the offset of the next opcode
  // "" or why the argument does not fit in the pickle, to follow "opcode X at byte N ":
  // "needs 8 bytes, but 3 remain", "announces 900 bytes, but 12 remain", "has no end of line".
  std::string problem;
};

// The argument of opcode `code`, a byte for which pickle_opcode() has a name, whose argument
// would start at data[at] (at <= size) in a pickle of `size` bytes. Reads nothing past `size`.
PickleArgument pickle_argument(const char* data, size_t size, size_t at, unsigned char code);

}  // namespace detail
}  // namespace trainpack
