// CRC-32C (trainpack/utils/crc32c.h): a portable slicing-by-8 table implementation, and on x86-64
// the SSE4.2 `crc32` instruction, picked once at run time.
#include "trainpack/utils/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>  // usable without -msse4.2 inside a target("sse4.2") function
#endif

namespace trainpack {
namespace crc32c {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// kTables[0] is the classic byte-at-a-time table; kTables[k][b] is the CRC of byte b followed by
// k zero bytes, so 8 bytes can be folded with 8 lookups (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  }
  return t;
}

constexpr Tables kTables = make_tables();

inline uint32_t load_le32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

#if defined(__x86_64__)

// ---- Combining interleaved streams ----
// The CRC register (before the final inversion) is linear over GF(2): the register after A then B
// is shift_{|B|}(register after A) ^ (register of B started from 0), where shift_n multiplies by
// x^(8n) modulo the polynomial (zlib's crc32_combine, with the Castagnoli polynomial). For a fixed
// n that multiplication is linear in the register's 32 bits, so four 256-entry tables (one per
// register byte) do it in four lookups. Polynomials are in the reflected order: bit 31 is x^0.

// a * b modulo the polynomial.
constexpr uint32_t multiply_mod_p(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(8 * bytes) modulo the polynomial, by squaring.
constexpr uint32_t x_pow_8n_mod_p(uint64_t bytes) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t square = 1u << 23;  // x^8: one byte
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1) result = multiply_mod_p(square, result);
    square = multiply_mod_p(square, square);
  }
  return result;
}

using ShiftTable = std::array<std::array<uint32_t, 256>, 4>;

constexpr ShiftTable make_shift_table(uint64_t bytes) {
  const uint32_t op = x_pow_8n_mod_p(bytes);
  ShiftTable t{};
  for (uint32_t k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = multiply_mod_p(op, b << (8 * k));
  }
  return t;
}

inline uint32_t shift(const ShiftTable& t, uint32_t crc) {
  return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

// Three streams hide the instruction's latency (3 cycles, one issued per cycle). Long blocks for
// the bulk, short ones for the rest, one stream for the last bytes.
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;
constexpr ShiftTable kLongShift = make_shift_table(kLong);
constexpr ShiftTable kShortShift = make_shift_table(kShort);

inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

__attribute__((target("sse4.2"))) uint32_t three_streams(uint32_t c0, const unsigned char*& p,
                                                         size_t& size, size_t block,
                                                         const ShiftTable& table) {
  while (size >= 3 * block) {
    uint64_t a = c0, b = 0, c = 0;
    const unsigned char* const end = p + block;
    do {
      a = _mm_crc32_u64(a, load64(p));
      b = _mm_crc32_u64(b, load64(p + block));
      c = _mm_crc32_u64(c, load64(p + 2 * block));
      p += 8;
    } while (p != end);
    c0 = shift(table, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    c0 = shift(table, c0) ^ static_cast<uint32_t>(c);
    p += 2 * block;
    size -= 3 * block;
  }
  return c0;
}

__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t crc, const void* data,
                                                        size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(c, *p++);
    --size;
  }
  c = three_streams(c, p, size, kLong, kLongShift);
  c = three_streams(c, p, size, kShort, kShortShift);
  uint64_t c64 = c;
  for (; size >= 8; size -= 8, p += 8) c64 = _mm_crc32_u64(c64, load64(p));
  c = static_cast<uint32_t>(c64);
  for (; size > 0; --size) c = _mm_crc32_u8(c, *p++);
  return ~c;
}

#endif  // __x86_64__

bool detect_hardware() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // may run before libgcc's own initialiser (a static constructor's CRC)
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

}  // namespace

uint32_t extend_portable(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (size >= 8) {
    const uint32_t lo = load_le32(p) ^ c;
    const uint32_t hi = load_le32(p + 4);
    c = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xff] ^ kTables[2][(hi >> 8) & 0xff] ^
        kTables[1][(hi >> 16) & 0xff] ^ kTables[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xff];
  return ~c;
}

uint32_t extend_hardware(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  return extend_sse42(crc, data, size);
#else
  return extend_portable(crc, data, size);
#endif
}

bool hardware_available() {
  static const bool available = detect_hardware();
  return available;
}

uint32_t extend(uint32_t crc, const void* data, size_t size) {
  return hardware_available() ? extend_hardware(crc, data, size) : extend_portable(crc, data, size);
}

}  // namespace crc32c
}  // namespace trainpack
