// The format decoders behind decode_image (src/utils/image_decode.cpp), one source each
// (image_decode_png.cpp, image_decode_jpeg.cpp), and the messages they share; not for users.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <ATen/ATen.h>

namespace trainpack {
namespace detail {

// An image as the file holds it, 8 bits a sample: `hwc` is a contiguous uint8 [H, W, C] tensor
// with C in 1..4 (grey, grey+alpha, RGB, RGBA).
struct DecodedImage {
  at::Tensor hwc;
};

// Whether width x height is over `max_pixels` (0: no limit).
bool image_over_pixel_limit(uint64_t width, uint64_t height, int64_t max_pixels);

// Throws the ImageDecodeError for an image of width x height over `max_pixels`.
[[noreturn]] void throw_image_over_pixel_limit(const std::string& name, const char* format,
                                               uint64_t width, uint64_t height, int64_t max_pixels);

// Allocates a uint8 [height, width, channels] tensor into *hwc and returns its data; on failure
// nullptr, with the reason in *error. Never throws (the decoders call it between setjmp and
// longjmp).
uint8_t* allocate_image_pixels(at::Tensor* hwc, std::string* error, uint64_t height, uint64_t width,
                               int channels) noexcept;

// Throws the ImageDecodeError for an image of width x height whose pixels could not be allocated
// (`reason`: the allocation's error).
[[noreturn]] void throw_image_out_of_memory(const std::string& name, const char* format,
                                            uint64_t width, uint64_t height,
                                            const std::string& reason);

// Throws the ImageDecodeError for image data of `format` that ends early (`size` bytes).
[[noreturn]] void throw_image_truncated(const std::string& name, const char* format, size_t size);

// Throws the ImageDecodeError for a corrupt or unsupported image of `format` (a 12-bit JPEG), with
// the library's message.
[[noreturn]] void throw_image_corrupt(const std::string& name, const char* format,
                                      const std::string& library_message);

// Decode a PNG / a JPEG (the caller has sniffed the format). Grey with fewer than 8 bits, palette
// and tRNS are expanded, 16 bits scaled to 8 (PNG); CMYK and YCCK become RGB (JPEG). Throw
// ImageDecodeError; an image over `max_pixels` is refused from its header, before its pixels are
// allocated.
DecodedImage decode_png_image(const uint8_t* data, size_t size, const std::string& name,
                              int64_t max_pixels);
DecodedImage decode_jpeg_image(const uint8_t* data, size_t size, const std::string& name,
                               int64_t max_pixels);

}  // namespace detail
}  // namespace trainpack
