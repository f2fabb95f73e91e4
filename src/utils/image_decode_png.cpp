// PNG decoding with libpng, for decode_image (trainpack/utils/image_decode.h).
//
// libpng reports errors by longjmp back to the frame that called setjmp (png_decode_run). Nothing
// with a destructor lives in that frame, nor in the callbacks that libpng leaves by longjmp: the
// state is a plain struct, the message a fixed buffer, and the tensor is made by a callback that
// returns before libpng goes on (png_decode_allocate), into an object of the caller's frame.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "trainpack/detail/image_decoders.h"
#include "trainpack/utils/image_decode.h"

namespace trainpack {
namespace {

// What the tensor callback fills in, in png_decode_image's frame.
struct PngDecodeOutput {
  at::Tensor hwc;
  std::string error;
};

struct PngDecodeState {
  const uint8_t* data;
  size_t size;
  size_t offset;
  int64_t max_pixels;
  PngDecodeOutput* output;
  // Returns the [height, width, channels] buffer, or nullptr with output->error set.
  uint8_t* (*allocate)(PngDecodeOutput* output, png_uint_32 width, png_uint_32 height,
                       int channels);
  png_uint_32 width;
  png_uint_32 height;
  bool truncated;
  char error[256];
};

enum class PngDecodeResult { kOk, kError, kOverPixelLimit, kAllocationFailed };

uint8_t* png_decode_allocate(PngDecodeOutput* output, png_uint_32 width, png_uint_32 height,
                             int channels) noexcept {
  return detail::allocate_image_pixels(&output->hwc, &output->error, height, width, channels);
}

void png_decode_on_error(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngDecodeState*>(png_get_error_ptr(png));
  std::snprintf(st->error, sizeof st->error, "%s", msg != nullptr ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}

void png_decode_on_warning(png_structp, png_const_charp) {}

void png_decode_on_read(png_structp png, png_bytep out, png_size_t length) {
  auto* st = static_cast<PngDecodeState*>(png_get_io_ptr(png));
  if (length > st->size - st->offset) {
    st->truncated = true;
    png_error(png, "the data ends early");
  }
  std::memcpy(out, st->data + st->offset, length);
  st->offset += length;
}

// Decodes st->data into the buffer st->allocate returns. No object with a destructor in this
// frame: libpng leaves it by longjmp.
PngDecodeResult png_decode_run(PngDecodeState* st) {
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, st, png_decode_on_error, png_decode_on_warning);
  if (png == nullptr) {
    std::snprintf(st->error, sizeof st->error, "png_create_read_struct failed");
    return PngDecodeResult::kError;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(st->error, sizeof st->error, "png_create_info_struct failed");
    return PngDecodeResult::kError;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return PngDecodeResult::kError;
  }
  png_set_read_fn(png, st, png_decode_on_read);
  // libpng's own limit (1,000,000 columns or rows) would refuse before ours; max_pixels decides.
  png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
  png_read_info(png, info);
  st->width = png_get_image_width(png, info);
  st->height = png_get_image_height(png, info);
  if (detail::image_over_pixel_limit(st->width, st->height, st->max_pixels)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return PngDecodeResult::kOverPixelLimit;
  }
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS) != 0) png_set_tRNS_to_alpha(png);
  if (bit_depth == 16) png_set_scale_16(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int channels = png_get_channels(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  if (channels < 1 || channels > 4 || row_bytes != static_cast<size_t>(st->width) * channels) {
    std::snprintf(st->error, sizeof st->error, "unexpected layout after expansion (%d channels)",
                  channels);
    png_destroy_read_struct(&png, &info, nullptr);
    return PngDecodeResult::kError;
  }
  uint8_t* pixels = st->allocate(st->output, st->width, st->height, channels);
  if (pixels == nullptr) {
    png_destroy_read_struct(&png, &info, nullptr);
    return PngDecodeResult::kAllocationFailed;
  }
  // Each pass of an interlaced image adds its pixels to the rows that the earlier ones filled.
  for (int pass = 0; pass < passes; ++pass) {
    for (png_uint_32 y = 0; y < st->height; ++y) {
      png_read_row(png, pixels + static_cast<size_t>(y) * row_bytes, nullptr);
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return PngDecodeResult::kOk;
}

}  // namespace

namespace detail {

DecodedImage decode_png_image(const uint8_t* data, size_t size, const std::string& name,
                              int64_t max_pixels) {
  PngDecodeOutput output;
  PngDecodeState st{};
  st.data = data;
  st.size = size;
  st.max_pixels = max_pixels;
  st.output = &output;
  st.allocate = png_decode_allocate;
  switch (png_decode_run(&st)) {
    case PngDecodeResult::kOk:
      return DecodedImage{std::move(output.hwc)};
    case PngDecodeResult::kOverPixelLimit:
      throw_image_over_pixel_limit(name, "PNG", st.width, st.height, max_pixels);
    case PngDecodeResult::kAllocationFailed:
      throw_image_out_of_memory(name, "PNG", st.width, st.height, output.error);
    case PngDecodeResult::kError:
      break;
  }
  if (st.truncated) throw_image_truncated(name, "PNG", size);
  throw_image_corrupt(name, "PNG", st.error);
}

}  // namespace detail
}  // namespace trainpack
