// NumPy `.npy` / `.npz` writing for DumpTensors (tensorpack dumps variables with np.savez): a file
// that numpy.load opens. Entries are stored, not compressed (as savez does), with a fixed
// timestamp, so that the same tensors give the same bytes; no ZIP64. Assumes a little-endian
// host. How it differs from numpy.savez: docs/architecture.md, "NumPy files".
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

namespace trainpack {

// Returns the `.npy` (format 1.0) bytes of `tensor`: the header, padded with spaces and ended by
// a newline so that the data starts at a multiple of 64 bytes, then the data in C order. The tensor
// is moved to the CPU and made contiguous first (a transposed tensor is written in logical
// order). dtypes: float32 <f4, float64 <f8, float16 <f2, int8 |i1, uint8 |u1, int16 <i2,
// int32 <i4, int64 <i8, bool |b1; any other (or an undefined tensor) throws
// std::invalid_argument naming it.
std::string encode_npy(const at::Tensor& tensor);

// Writes `arrays` as an `.npz` (a zip of `<name>.npy` entries) with the keys in the given order,
// replacing `path` atomically (utils/atomic_file.h). Throws std::invalid_argument before touching
// the file system for an empty name, a name with a NUL byte, a leading '/' or '\\', or a `..`
// component (extracting cannot escape a directory), a duplicate name, an unsupported dtype
// (naming dtype and name), or a size needing ZIP64 (4 GiB or 65535 arrays); std::runtime_error
// naming the path and the reason when the file cannot be written.
void write_npz(const std::string& path,
               const std::vector<std::pair<std::string, at::Tensor>>& arrays);

}  // namespace trainpack
