// CRC-32C (Castagnoli, the polynomial 0x1EDC6F41, reflected 0x82F63B78), as TFRecord files (the
// event files TensorBoard reads) checksum their records and checkpoints their data files.
//
// Written by hand: Debian 12 packages no C/C++ CRC-32C library (only python3-crc32c); zlib's
// crc32 is the other polynomial. Two implementations, chosen once at run time:
//   - x86-64 with SSE4.2: the `crc32` instruction on three interleaved streams, combined with
//     precomputed shift tables (about 10 times the speed of the table code; the build needs no
//     -msse4.2 flag: only that function is compiled for SSE4.2);
//   - everywhere else: table-driven, slicing by 8 bytes at a time.
// Both give the same values; extend() uses the faster one the CPU has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trainpack {
namespace crc32c {

// Continues a CRC over `data` from the CRC of the bytes before it (0 to start):
// extend(extend(0, a), b) == value(a + b). value("123456789") == 0xE3069283.
uint32_t extend(uint32_t crc, const void* data, size_t size);
inline uint32_t value(const void* data, size_t size) { return extend(0, data, size); }
inline uint32_t value(std::string_view s) { return extend(0, s.data(), s.size()); }

// The two implementations, for tests and benchmarks (extend() picks one):
// extend_portable() runs everywhere; extend_hardware() uses SSE4.2 and may only be called when
// hardware_available() (an x86-64 CPU with SSE4.2); elsewhere it is extend_portable().
uint32_t extend_portable(uint32_t crc, const void* data, size_t size);
uint32_t extend_hardware(uint32_t crc, const void* data, size_t size);
bool hardware_available();

// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 (a CRC of data that itself
// holds CRCs is then not degenerate).
constexpr uint32_t kMaskDelta = 0xa282ead8u;
constexpr uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
constexpr uint32_t unmask(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace crc32c
}  // namespace trainpack
