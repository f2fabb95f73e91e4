// A walk over the opcodes of a Python pickle (protocols 0 to 5) that checks, before any
// unpickler sees it, what LibTorch's unpickler would allocate from without a check: every
// argument must fit in the bytes that remain (a length prefix of 2 GiB in a 1 KiB pickle would
// be allocated first and found short afterwards), and every memo index must be one the memo has
// or the next one (a BINPUT of index 700,000,000 would size the memo table to 11 GB). The
// checkpoint reader (utils/checkpoint.h) runs it on data.pkl.
//
// It checks bounds only, not meaning: a pickle it passes may still be refused by LibTorch's
// unpickler. The argument formats are those of Python's pickletools (Lib/pickletools.py).
//
//   if (std::string why = pickle_bounds_problem(bytes, n); !why.empty()) refuse(why);
#pragma once

#include <cstddef>
#include <string>

namespace trainpack {

// "" when the pickle `data[0, size)` is a sequence of known opcodes whose arguments all fit and
// whose memo indices are in range, ending with STOP (bytes after STOP are ignored); else what is
// wrong, with the byte offset ("opcode BINUNICODE at byte 57 announces 2147483647 bytes, but 933
// remain"). Protocol 0's text memo opcodes (PUT, GET) are refused: LibTorch does not write them.
std::string pickle_bounds_problem(const char* data, size_t size);

}  // namespace trainpack
