// A walk over the opcodes of a Python pickle (protocols 0 to 5) that checks the bounds LibTorch's
// unpickler would allocate from without a check: every argument fits in the bytes that remain,
// and every memo index is one the memo has or the next one. Bounds only, not meaning: a pickle it
// passes may still be refused by the unpickler. The checkpoint reader (utils/checkpoint.h) runs
// it on data.pkl; why:
// docs/libtorch-versions.md, "Checkpoints from elsewhere" (under "What differs between versions").
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
