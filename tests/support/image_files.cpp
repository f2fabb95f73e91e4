// PNG and JPEG writers for the image decoding tests (support/image_files.h). libpng and libjpeg
// report errors by longjmp to the frame that called setjmp: those frames (image_files_write_png,
// image_files_write_jpeg) hold no object with a destructor; the bytes are built before and
// collected after, in the callers' frames.
#include "support/image_files.h"

#include <cstdio>  // before jpeglib.h

#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainpack {
namespace testing {
namespace image_files {

struct PngWriteState {
  std::string* out;
  char error[256];
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngWriteState*>(png_get_error_ptr(png));
  std::snprintf(st->error, sizeof st->error, "%s", msg);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

void png_on_write(png_structp png, png_bytep data, png_size_t length) {
  static_cast<PngWriteState*>(png_get_io_ptr(png))
      ->out->append(reinterpret_cast<const char*>(data), length);
}

void png_on_flush(png_structp) {}

// `rows`: height rows of `row_bytes` bytes each, as PNG stores them (16-bit big-endian; 1, 2 and
// 4 bits one sample a byte, packed by libpng).
bool write_png(PngWriteState* st, const TestPng* desc, const uint8_t* rows, size_t row_bytes,
               const png_color* palette, int palette_size, const png_byte* trns_alpha,
               int trns_count, const png_color_16* trns_colour) {
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, st, png_on_error, png_on_warning);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, st, png_on_write, png_on_flush);
  png_set_IHDR(png, info, desc->width, desc->height, desc->bit_depth,
               static_cast<int>(desc->colour),
               desc->interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (palette_size > 0) png_set_PLTE(png, info, palette, palette_size);
  if (trns_count > 0 || trns_colour != nullptr) {
    png_set_tRNS(png, info, trns_alpha, trns_count, trns_colour);
  }
  png_write_info(png, info);
  if (desc->bit_depth < 8) png_set_packing(png);
  const int passes = png_set_interlace_handling(png);
  for (int pass = 0; pass < passes; ++pass) {
    for (uint32_t y = 0; y < desc->height; ++y) {
      png_write_row(png, rows + y * row_bytes);
    }
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

struct JpegWriteState {
  jpeg_error_mgr error_manager;  // first: libjpeg's err pointer is this state
  jmp_buf jump;
  char error[JMSG_LENGTH_MAX];
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* st = reinterpret_cast<JpegWriteState*>(cinfo->err);
  cinfo->err->format_message(cinfo, st->error);
  std::longjmp(st->jump, 1);
}

bool write_jpeg(JpegWriteState* st, jpeg_compress_struct* cinfo, const TestJpeg* desc,
                unsigned char** buffer, unsigned long* size) {
  cinfo->err = jpeg_std_error(&st->error_manager);
  st->error_manager.error_exit = jpeg_on_error;
  if (setjmp(st->jump)) {
    jpeg_destroy_compress(cinfo);
    return false;
  }
  jpeg_create_compress(cinfo);
  jpeg_mem_dest(cinfo, buffer, size);
  cinfo->image_width = desc->width;
  cinfo->image_height = desc->height;
  cinfo->input_components = desc->components;
  cinfo->in_color_space = desc->components == 1   ? JCS_GRAYSCALE
                          : desc->components == 4 ? JCS_CMYK
                                                  : JCS_RGB;
  jpeg_set_defaults(cinfo);
  cinfo->dct_method = JDCT_ISLOW;
  jpeg_set_quality(cinfo, desc->quality, TRUE);
  if (desc->components == 4 && !desc->adobe_marker) cinfo->write_Adobe_marker = FALSE;
  if (desc->progressive) jpeg_simple_progression(cinfo);
  jpeg_start_compress(cinfo, TRUE);
  const size_t row_bytes = static_cast<size_t>(desc->width) * desc->components;
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row = const_cast<JSAMPLE*>(desc->samples.data() + cinfo->next_scanline * row_bytes);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  jpeg_destroy_compress(cinfo);
  return true;
}

}  // namespace image_files

std::string encode_test_png(const TestPng& png) {
  const int per_pixel = png.colour == PngColour::kGrey        ? 1
                        : png.colour == PngColour::kPalette   ? 1
                        : png.colour == PngColour::kGreyAlpha ? 2
                        : png.colour == PngColour::kRGB       ? 3
                                                              : 4;
  const size_t samples_per_row = static_cast<size_t>(png.width) * per_pixel;
  if (png.samples.size() != samples_per_row * png.height) {
    throw std::runtime_error("encode_test_png: wrong number of samples");
  }
  const size_t bytes_per_sample = png.bit_depth == 16 ? 2 : 1;
  const size_t row_bytes = samples_per_row * bytes_per_sample;
  std::vector<uint8_t> rows(row_bytes * png.height);
  for (size_t i = 0; i < png.samples.size(); ++i) {
    if (bytes_per_sample == 2) {
      rows[2 * i] = static_cast<uint8_t>(png.samples[i] >> 8);
      rows[2 * i + 1] = static_cast<uint8_t>(png.samples[i] & 0xff);
    } else {
      rows[i] = static_cast<uint8_t>(png.samples[i]);
    }
  }
  std::vector<png_color> palette(png.palette_rgb.size() / 3);
  for (size_t i = 0; i < palette.size(); ++i) {
    palette[i] = {png.palette_rgb[3 * i], png.palette_rgb[3 * i + 1], png.palette_rgb[3 * i + 2]};
  }
  std::vector<png_byte> trns_alpha;
  png_color_16 trns_colour{};
  bool has_trns_colour = false;
  if (png.colour == PngColour::kPalette) {
    for (uint16_t a : png.transparency) trns_alpha.push_back(static_cast<png_byte>(a));
  } else if (png.colour == PngColour::kGrey && png.transparency.size() == 1) {
    trns_colour.gray = png.transparency[0];
    has_trns_colour = true;
  } else if (png.colour == PngColour::kRGB && png.transparency.size() == 3) {
    trns_colour.red = png.transparency[0];
    trns_colour.green = png.transparency[1];
    trns_colour.blue = png.transparency[2];
    has_trns_colour = true;
  }
  std::string out;
  image_files::PngWriteState st{&out, {}};
  if (!image_files::write_png(&st, &png, rows.data(), row_bytes, palette.data(),
                              static_cast<int>(palette.size()), trns_alpha.data(),
                              static_cast<int>(trns_alpha.size()),
                              has_trns_colour ? &trns_colour : nullptr)) {
    throw std::runtime_error(std::string("encode_test_png: ") + st.error);
  }
  return out;
}

std::string encode_test_jpeg(const TestJpeg& jpeg) {
  if (jpeg.samples.size() != static_cast<size_t>(jpeg.width) * jpeg.height * jpeg.components) {
    throw std::runtime_error("encode_test_jpeg: wrong number of samples");
  }
  image_files::JpegWriteState st{};
  jpeg_compress_struct cinfo{};
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const bool ok = image_files::write_jpeg(&st, &cinfo, &jpeg, &buffer, &size);
  std::string out = ok ? std::string(reinterpret_cast<const char*>(buffer), size) : std::string();
  std::free(buffer);
  if (!ok) throw std::runtime_error(std::string("encode_test_jpeg: ") + st.error);
  return out;
}

}  // namespace testing
}  // namespace trainpack
