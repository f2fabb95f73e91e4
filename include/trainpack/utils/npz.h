// NumPy `.npy` / `.npz` writing for DumpTensors (tensorpack dumps variables with np.savez).
//
// Example:
//   trainpack::write_npz("/logs/dump-100.npz", {{"fc/W", w}, {"fc/b", b}});
//   // python: d = np.load("/logs/dump-100.npz"); d["fc/W"].shape
//
// The NPY format (version 1.0) and the zip container are written by hand: no Debian library
// writes either from C++; zlib gives only the CRC-32. Differences from numpy.savez: entries are
// stored, not compressed (same as savez; savez_compressed deflates); every entry carries the fixed
// timestamp 1980-01-01 00:00 so that the same tensors give the same bytes; no ZIP64, so a file
// (or an entry) of 4 GiB or more, or more than 65535 arrays, is rejected; keys are checked (see
// write_npz) where savez accepts any string. Assumes a little-endian host.
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

// Writes `arrays` as an `.npz` (a zip of `<name>.npy` entries, stored) that numpy.load opens,
// with the keys in the given order. The file is written to a new temporary file beside it
// (AtomicFileWriter's `<path>.tmp.<pid>.<n>`), fsynced and renamed to `path` (an existing file,
// or a symlink, is replaced atomically), then the directory is fsynced. Throws
// std::invalid_argument before touching the file system for: an empty name, a name with a NUL
// byte, a leading '/' or '\\', or a `..` component (so that extracting cannot escape a
// directory), a duplicate name, an unsupported dtype (naming dtype and name), or a size needing
// ZIP64; std::runtime_error naming the path and the reason when the file cannot be written.
void write_npz(const std::string& path,
               const std::vector<std::pair<std::string, at::Tensor>>& arrays);

}  // namespace trainpack
