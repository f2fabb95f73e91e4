// PNG encoding for image summaries (TensorFlow's Summary.Image holds a PNG), with Debian's libpng.
#pragma once

#include <cstdint>
#include <string>

namespace trainpack {

// Encodes an 8-bit image laid out height x width x channels (row-major, interleaved) as a PNG,
// zlib compression level 9. channels: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA. Throws
// std::invalid_argument for a null pointer, a non-positive or too large height/width (PNG's limit
// is 2^31-1), or another channel count; std::runtime_error if libpng itself fails.
std::string encode_png(const uint8_t* hwc, int64_t height, int64_t width, int64_t channels);

}  // namespace trainpack
