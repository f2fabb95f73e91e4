#include "trainpack/utils/png.h"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace trainpack {
namespace {

// libpng reports errors by longjmp; nothing with a destructor may live in the frame that calls
// setjmp, so the encoder below works on plain pointers and the message goes to a fixed buffer.
struct PngState {
  std::string* out;
  char error[256];
};

void on_error(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(st->error, sizeof st->error, "%s", msg ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void on_write(png_structp png, png_bytep data, png_size_t length) {
  auto* st = static_cast<PngState*>(png_get_io_ptr(png));
  st->out->append(reinterpret_cast<const char*>(data), length);
}

void on_flush(png_structp) {}

// Returns true on success; on failure st->error holds libpng's message.
bool encode_rows(PngState* st, const uint8_t* hwc, png_uint_32 height, png_uint_32 width,
                 int color_type, size_t row_bytes) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, st, on_error, on_warning);
  if (png == nullptr) {
    std::snprintf(st->error, sizeof st->error, "png_create_write_struct failed");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    std::snprintf(st->error, sizeof st->error, "png_create_info_struct failed");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, st, on_write, on_flush);
  png_set_compression_level(png, 9);
  png_set_IHDR(png, info, width, height, 8, color_type, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (png_uint_32 y = 0; y < height; ++y) {
    // libpng takes a non-const row pointer but does not modify the row when writing.
    png_write_row(png, const_cast<png_bytep>(hwc + static_cast<size_t>(y) * row_bytes));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

std::string encode_png(const uint8_t* hwc, int64_t height, int64_t width, int64_t channels) {
  constexpr int64_t kMaxDim = 0x7fffffff;  // PNG_UINT_31_MAX
  if (hwc == nullptr) throw std::invalid_argument("encode_png: the image pointer is null");
  if (height <= 0 || width <= 0 || height > kMaxDim || width > kMaxDim) {
    throw std::invalid_argument("encode_png: bad image size " + std::to_string(height) + "x" +
                                std::to_string(width) +
                                " (height and width must be in [1, 2^31-1])");
  }
  int color_type = 0;
  switch (channels) {
    case 1:
      color_type = PNG_COLOR_TYPE_GRAY;
      break;
    case 2:
      color_type = PNG_COLOR_TYPE_GRAY_ALPHA;
      break;
    case 3:
      color_type = PNG_COLOR_TYPE_RGB;
      break;
    case 4:
      color_type = PNG_COLOR_TYPE_RGB_ALPHA;
      break;
    default:
      throw std::invalid_argument("encode_png: channels must be 1, 2, 3 or 4, got " +
                                  std::to_string(channels));
  }
  if (width > std::numeric_limits<int64_t>::max() / channels) {
    throw std::invalid_argument("encode_png: image row too large");
  }
  std::string out;
  PngState st{&out, {0}};
  if (!encode_rows(&st, hwc, static_cast<png_uint_32>(height), static_cast<png_uint_32>(width),
                   color_type, static_cast<size_t>(width * channels))) {
    throw std::runtime_error(std::string("encode_png: libpng failed: ") + st.error);
  }
  return out;
}

}  // namespace trainpack
