// JPEG decoding with libjpeg-turbo, for decode_image (trainpack/utils/image_decode.h).
//
// libjpeg reports errors through its error manager, whose error_exit must not return: it longjmps
// back to the frame that called setjmp (jpeg_decode_run). Nothing with a destructor lives in that
// frame, nor in the callbacks that libjpeg leaves by longjmp: the state is a plain struct, the
// message a fixed buffer, and the tensor is made by a callback that returns before libjpeg goes on
// (jpeg_decode_allocate), into an object of the caller's frame. libjpeg only warns when the data
// ends early (JWRN_JPEG_EOF; it then pads the image with grey): here that warning is an error.
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t

#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "trainpack/detail/image_decoders.h"
#include "trainpack/utils/image_decode.h"

namespace trainpack {
namespace {

// What the tensor callback fills in, in jpeg_decode_image's frame.
struct JpegDecodeOutput {
  at::Tensor hwc;
  std::string error;
};

// The error manager first, so that libjpeg's j_common_ptr->err can be cast to the whole state.
struct JpegDecodeState {
  jpeg_error_mgr error_manager;
  jmp_buf jump;
  const uint8_t* data;
  size_t size;
  int64_t max_pixels;
  JpegDecodeOutput* output;
  // Returns the [height, width, channels] buffer, or nullptr with output->error set.
  uint8_t* (*allocate)(JpegDecodeOutput* output, JDIMENSION width, JDIMENSION height, int channels);
  JDIMENSION width;
  JDIMENSION height;
  bool cmyk;            // the pixels are CMYK (from a CMYK or YCCK file)
  bool adobe_inverted;  // ... stored inverted, as an Adobe APP14 marker says
  bool truncated;
  char error[JMSG_LENGTH_MAX];
};

enum class JpegDecodeResult { kOk, kError, kOverPixelLimit, kAllocationFailed };

uint8_t* jpeg_decode_allocate(JpegDecodeOutput* output, JDIMENSION width, JDIMENSION height,
                              int channels) noexcept {
  return detail::allocate_image_pixels(&output->hwc, &output->error, height, width, channels);
}

void jpeg_decode_error_exit(j_common_ptr cinfo) {
  auto* st = reinterpret_cast<JpegDecodeState*>(cinfo->err);
  cinfo->err->format_message(cinfo, st->error);
  std::longjmp(st->jump, 1);
}

// Warnings (msg_level -1) are dropped, as Pillow drops them, except the end of the data.
void jpeg_decode_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level != -1 || cinfo->err->msg_code != JWRN_JPEG_EOF) return;
  auto* st = reinterpret_cast<JpegDecodeState*>(cinfo->err);
  st->truncated = true;
  cinfo->err->format_message(cinfo, st->error);
  std::longjmp(st->jump, 1);
}

// Decodes st->data into the buffer st->allocate returns. No object with a destructor in this
// frame: libjpeg leaves it by longjmp. `cinfo` is the caller's, so that it keeps its value.
JpegDecodeResult jpeg_decode_run(JpegDecodeState* st, jpeg_decompress_struct* cinfo) {
  cinfo->err = jpeg_std_error(&st->error_manager);
  st->error_manager.error_exit = jpeg_decode_error_exit;
  st->error_manager.emit_message = jpeg_decode_emit_message;
  if (setjmp(st->jump)) {
    jpeg_destroy_decompress(cinfo);
    return JpegDecodeResult::kError;
  }
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, st->data, static_cast<unsigned long>(st->size));
  jpeg_read_header(cinfo, TRUE);
  st->width = cinfo->image_width;
  st->height = cinfo->image_height;
  if (detail::image_over_pixel_limit(st->width, st->height, st->max_pixels)) {
    jpeg_destroy_decompress(cinfo);
    return JpegDecodeResult::kOverPixelLimit;
  }
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
      cinfo->out_color_space = JCS_GRAYSCALE;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo->out_color_space = JCS_CMYK;
      st->cmyk = true;
      st->adobe_inverted = cinfo->saw_Adobe_marker != 0;
      break;
    default:
      cinfo->out_color_space = JCS_RGB;
      break;
  }
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  jpeg_start_decompress(cinfo);
  const int channels = cinfo->output_components;
  uint8_t* pixels = st->allocate(st->output, cinfo->output_width, cinfo->output_height, channels);
  if (pixels == nullptr) {
    jpeg_destroy_decompress(cinfo);
    return JpegDecodeResult::kAllocationFailed;
  }
  const size_t row_bytes = static_cast<size_t>(cinfo->output_width) * channels;
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = pixels + static_cast<size_t>(cinfo->output_scanline) * row_bytes;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  // Reads up to the end-of-image marker: without it a progressive JPEG cut between two scans would
  // pass for complete (its pixels are then those of the scans before the cut).
  jpeg_finish_decompress(cinfo);
  jpeg_destroy_decompress(cinfo);
  return JpegDecodeResult::kOk;
}

// Pillow's MULDIV255: a * b / 255 rounded, exact for a, b in [0, 255].
inline int jpeg_muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// CMYK [H, W, 4] to RGB [H, W, 3] as Pillow's convert("RGB"): with the ink values c and k (the
// stored ones, or 255 minus them when inverted), R = (255 - k) - c * (255 - k) / 255 (rounded).
at::Tensor jpeg_cmyk_to_rgb(const at::Tensor& cmyk, bool inverted) {
  const int64_t pixels = cmyk.size(0) * cmyk.size(1);
  at::Tensor rgb = at::empty({cmyk.size(0), cmyk.size(1), 3}, at::kByte);
  const uint8_t* in = cmyk.data_ptr<uint8_t>();
  uint8_t* out = rgb.data_ptr<uint8_t>();
  const int flip = inverted ? 255 : 0;
  for (int64_t i = 0; i < pixels; ++i, in += 4, out += 3) {
    const int nk = 255 - (in[3] ^ flip);
    for (int c = 0; c < 3; ++c) {
      out[c] = static_cast<uint8_t>(nk - jpeg_muldiv255(in[c] ^ flip, nk));
    }
  }
  return rgb;
}

}  // namespace

namespace detail {

DecodedImage decode_jpeg_image(const uint8_t* data, size_t size, const std::string& name,
                               int64_t max_pixels) {
  JpegDecodeOutput output;
  JpegDecodeState st{};
  jpeg_decompress_struct cinfo{};
  st.data = data;
  st.size = size;
  st.max_pixels = max_pixels;
  st.output = &output;
  st.allocate = jpeg_decode_allocate;
  switch (jpeg_decode_run(&st, &cinfo)) {
    case JpegDecodeResult::kOk:
      if (st.cmyk) return DecodedImage{jpeg_cmyk_to_rgb(output.hwc, st.adobe_inverted)};
      return DecodedImage{std::move(output.hwc)};
    case JpegDecodeResult::kOverPixelLimit:
      throw_image_over_pixel_limit(name, "JPEG", st.width, st.height, max_pixels);
    case JpegDecodeResult::kAllocationFailed:
      throw_image_out_of_memory(name, "JPEG", st.width, st.height, output.error);
    case JpegDecodeResult::kError:
      break;
  }
  if (st.truncated) throw_image_truncated(name, "JPEG", size);
  throw_image_corrupt(name, "JPEG", st.error);
}

}  // namespace detail
}  // namespace trainpack
