// The image reads and pixel operations of the fusion engine, written once for the CPU executor
// and the NVRTC-generated kernels (same rules as fusion_ops.hpp: no STL, KF_HOST_DEVICE, the
// dtype as a kf_dtype_t integer, float arithmetic through the explicitly rounded *_rn helpers so
// that both backends compute the same bits).
//
// A read runs in output space. For one launch item:
//   1. make_read_geometry(crop, output size, keep_aspect) gives the ReadGeometry: where the crop
//      lands in the output (the whole output, or with keep-aspect a centred content rectangle)
//      and the crop pixels per output pixel. Compute it once per item (host or device: it is
//      integer arithmetic plus one rounded division, identical everywhere).
//   2. read_image<D, C, Interp, Border, Keep>(image, geometry, x, y, border_values, out) or
//      read_nv12<Interp, Border, Keep, Standard, FullRange>(...) fills the C values of output
//      pixel (x, y), in the read's result type ReadCompute<D, Interp> (the image's compute type
//      for no resize and nearest; float for bilinear, double for f64 images; float for NV12).
//   3. color_convert<Conv, D>, normalize<D> transform pixel values.
//
// Coordinates. Output pixel x of an item with crop (cx, cy, cw, ch) and content rectangle
// (px, py, pw, ph) (the whole output without keep-aspect):
//   - outside the content rectangle (keep-aspect only): every channel is the border value;
//   - no resize: crop column x - px, i.e. source column cx + x;
//   - nearest: crop column floor((x - px + 0.5) * cw / pw), clamped into [0, cw);
//   - bilinear: crop coordinate u = (x - px + 0.5) * cw / pw - 0.5 (half-pixel centres), the
//     two columns floor(u) and floor(u) + 1 weighted by the fraction of u, in f32 (f64 images:
//     f64).
// Rows likewise. A crop column i outside [0, cw) follows the border rule in crop space (the crop
// is an image of its own); the resulting source column cx + i, when outside [0, W), follows it
// again in image space. Constant borders give the border value of the channel (a launch value).
//
// Keep-aspect (letterbox): the crop is resized to (pw, ph) = the largest size of its aspect that
// fits the output (the limiting side exactly, the other rounded half up, at least 1), centred at
// px = (W_out - pw) / 2, py = (H_out - ph) / 2 (rounded down): exactly "resize, then pad with the
// border value", the usual letterbox.
//
// NV12. The frame is a u8 tensor [H * 3 / 2, W]: Y plane rows 0..H-1, then H / 2 rows of
// interleaved U, V at half resolution. Every source pixel (after the border rules, in the
// frame's H x W) is converted to RGB on a 0..255 scale in f32 (chroma from the 2x2 block the
// pixel is in), clamped to [0, 255], and only then interpolated. Video range scales Y from
// 16..235 and U, V from 16..240; full range takes them as they are. Matrices: BT.601
// (Kr 0.299, Kb 0.114) and BT.709 (Kr 0.2126, Kb 0.0722).
#pragma once

#include "core/math/fusion_ops.hpp"
#include "core/math/host_device.hpp"

namespace kf {
namespace math {

// kf_interpolation_t, kf_border_t, kf_color_standard_t, kf_color_conversion_t as integers.
namespace interp {
constexpr int none = 0, nearest = 1, bilinear = 2;
}
namespace border {
constexpr int constant = 0, replicate = 1, reflect = 2;
}
namespace color_standard {
constexpr int bt601 = 0, bt709 = 1;
}
namespace color {
constexpr int rgb_to_bgr = 0, rgba_to_bgra = 1, rgb_to_gray = 2, bgr_to_gray = 3, rgba_to_rgb = 4,
              rgb_to_rgba = 5, rgba_to_bgr = 6, bgr_to_rgba = 7;
}

// An image as a read addresses it. HWC images: [height, width, channels] with element strides.
// NV12 frames: height and width of the frame (the Y plane); the tensor is [height * 3 / 2,
// width] with row_stride and col_stride (channel_stride unused).
struct ImageView {
  const void* data;
  int height;
  int width;
  long long row_stride;
  long long col_stride;
  long long channel_stride;
};

// Where a launch item's crop lands in its output; see the header comment.
struct ReadGeometry {
  int crop_x, crop_y, crop_w, crop_h;              // source rectangle
  int out_w, out_h;                                // output size
  int content_x, content_y, content_w, content_h;  // output rectangle the crop is resized to
  float scale_x, scale_y;                          // crop_w / content_w, crop_h / content_h
};

KF_HOST_DEVICE ReadGeometry make_read_geometry(int crop_x, int crop_y, int crop_w, int crop_h,
                                               int out_w, int out_h, bool keep_aspect) {
  ReadGeometry g;
  g.crop_x = crop_x;
  g.crop_y = crop_y;
  g.crop_w = crop_w;
  g.crop_h = crop_h;
  g.out_w = out_w;
  g.out_h = out_h;
  g.content_x = 0;
  g.content_y = 0;
  g.content_w = out_w;
  g.content_h = out_h;
  if (keep_aspect) {
    const long long cw = crop_w, ch = crop_h, ow = out_w, oh = out_h;
    if (cw * oh >= ch * ow) {  // width limits: content spans the output's width
      long long h = (2 * ch * ow + cw) / (2 * cw);
      g.content_h = static_cast<int>(h < 1 ? 1 : (h > oh ? oh : h));
    } else {
      long long w = (2 * cw * oh + ch) / (2 * ch);
      g.content_w = static_cast<int>(w < 1 ? 1 : (w > ow ? ow : w));
    }
    g.content_x = (out_w - g.content_w) / 2;
    g.content_y = (out_h - g.content_h) / 2;
  }
  g.scale_x = div_rn(static_cast<float>(crop_w), static_cast<float>(g.content_w));
  g.scale_y = div_rn(static_cast<float>(crop_h), static_cast<float>(g.content_h));
  return g;
}

// Index i of an axis of n pixels under a border rule: the pixel to read, or -1 for "the border
// value" (constant). Replicate: aaa|abcd|ddd. Reflect (101): dcb|abcd|cba, for any distance.
template <int Border>
KF_HOST_DEVICE long long border_index(long long i, long long n) {
  if (i >= 0 && i < n) return i;
  if constexpr (Border == border::constant) {
    return -1;
  } else if constexpr (Border == border::replicate) {
    return i < 0 ? 0 : n - 1;
  } else {
    static_assert(Border == border::reflect, "border_index: unknown border");
    if (n == 1) return 0;
    const long long period = 2 * n - 2;
    long long r = i % period;
    if (r < 0) r += period;
    return r < n ? r : period - r;
  }
}

// Crop-space index i (column or row of the crop) to the source index, through both border
// levels: -1 for the border value.
template <int Border>
KF_HOST_DEVICE long long source_index(long long i, int crop_origin, int crop_size, int image_size) {
  const long long in_crop = border_index<Border>(i, crop_size);
  if (in_crop < 0) return -1;
  return border_index<Border>(crop_origin + in_crop, image_size);
}

// The dtype of a read's value: the image's for no resize and nearest, f32 for bilinear (f64
// images stay f64).
template <int D, int Interp>
struct ReadDtype {
  static constexpr int value = (Interp == interp::bilinear && D != dtype::f64) ? dtype::f32 : D;
};
template <int D, int Interp>
using ReadCompute = Compute<ReadDtype<D, Interp>::value>;

namespace detail {

// Fetches the C channels of in-range source pixel (ix, iy) of an HWC image of dtype D.
template <int D, int C>
struct HwcFetch {
  using value_type = Compute<D>;
  const ImageView& image;
  KF_HOST_DEVICE void operator()(long long ix, long long iy, value_type* out) const {
    const long long base = iy * image.row_stride + ix * image.col_stride;
    for (int c = 0; c < C; ++c) out[c] = load<D>(image.data, base + c * image.channel_stride);
  }
};

// The C channels of source pixel (ix, iy) (indices from source_index), or the border values
// when either is -1.
template <int C, class Fetch, class T>
KF_HOST_DEVICE void fetch_source_pixel(const Fetch& fetch, long long ix, long long iy,
                                       const T* border_value, T* out) {
  if (ix < 0 || iy < 0) {
    for (int c = 0; c < C; ++c) out[c] = border_value[c];
    return;
  }
  typename Fetch::value_type v[C];
  fetch(ix, iy, v);
  for (int c = 0; c < C; ++c) out[c] = static_cast<T>(v[c]);
}

// The C channels of crop-space pixel (i, j), or the border values.
template <int C, int Border, class Fetch, class T>
KF_HOST_DEVICE void fetch_crop_pixel(const Fetch& fetch, const ReadGeometry& g, int image_w,
                                     int image_h, long long i, long long j, const T* border_value,
                                     T* out) {
  fetch_source_pixel<C>(fetch, source_index<Border>(i, g.crop_x, g.crop_w, image_w),
                        source_index<Border>(j, g.crop_y, g.crop_h, image_h), border_value, out);
}

// The generic read: output pixel (x, y) to the C values of type T (the read's compute type).
template <int C, int Interp, int Border, bool Keep, class T, class Fetch>
KF_HOST_DEVICE void sample(const Fetch& fetch, const ReadGeometry& g, int image_w, int image_h,
                           int x, int y, const T* border_value, T* out) {
  const int ox = x - g.content_x, oy = y - g.content_y;
  if (Keep && Interp != interp::none &&
      (ox < 0 || oy < 0 || ox >= g.content_w || oy >= g.content_h)) {
    for (int c = 0; c < C; ++c) out[c] = border_value[c];
    return;
  }
  if constexpr (Interp == interp::none) {
    fetch_crop_pixel<C, Border>(fetch, g, image_w, image_h, x, y, border_value, out);
  } else if constexpr (Interp == interp::nearest) {
    long long i = static_cast<long long>(floorf(mul_rn(static_cast<float>(ox) + 0.5f, g.scale_x)));
    long long j = static_cast<long long>(floorf(mul_rn(static_cast<float>(oy) + 0.5f, g.scale_y)));
    i = i < 0 ? 0 : (i >= g.crop_w ? g.crop_w - 1 : i);
    j = j < 0 ? 0 : (j >= g.crop_h ? g.crop_h - 1 : j);
    fetch_crop_pixel<C, Border>(fetch, g, image_w, image_h, i, j, border_value, out);
  } else {
    static_assert(Interp == interp::bilinear, "read: unknown interpolation");
    // u = (o + 0.5) * scale - 0.5 in f32 (every step rounded), then the weights in T.
    const float u = sub_rn(mul_rn(static_cast<float>(ox) + 0.5f, g.scale_x), 0.5f);
    const float v = sub_rn(mul_rn(static_cast<float>(oy) + 0.5f, g.scale_y), 0.5f);
    const float u0 = floorf(u), v0 = floorf(v);
    const T ax = static_cast<T>(sub_rn(u, u0)), ay = static_cast<T>(sub_rn(v, v0));
    const T bx = sub_rn(T(1), ax), by = sub_rn(T(1), ay);
    const long long i = static_cast<long long>(u0), j = static_cast<long long>(v0);
    // The two source columns and rows, each mapped through the borders once.
    const long long x0 = source_index<Border>(i, g.crop_x, g.crop_w, image_w);
    const long long x1 = source_index<Border>(i + 1, g.crop_x, g.crop_w, image_w);
    const long long y0 = source_index<Border>(j, g.crop_y, g.crop_h, image_h);
    const long long y1 = source_index<Border>(j + 1, g.crop_y, g.crop_h, image_h);
    T p00[C], p10[C], p01[C], p11[C];
    fetch_source_pixel<C>(fetch, x0, y0, border_value, p00);
    fetch_source_pixel<C>(fetch, x1, y0, border_value, p10);
    fetch_source_pixel<C>(fetch, x0, y1, border_value, p01);
    fetch_source_pixel<C>(fetch, x1, y1, border_value, p11);
    for (int c = 0; c < C; ++c) {
      const T top = add_rn(mul_rn(p00[c], bx), mul_rn(p10[c], ax));
      const T bottom = add_rn(mul_rn(p01[c], bx), mul_rn(p11[c], ax));
      out[c] = add_rn(mul_rn(top, by), mul_rn(bottom, ay));
    }
  }
}

}  // namespace detail

// Output pixel (x, y) of a read of an HWC image of dtype D with C channels. border_values holds
// C launch values (as doubles); out receives C values of the read's compute type.
template <int D, int C, int Interp, int Border, bool Keep>
KF_HOST_DEVICE void read_image(const ImageView& image, const ReadGeometry& g, int x, int y,
                               const double* border_values, ReadCompute<D, Interp>* out) {
  constexpr int R = ReadDtype<D, Interp>::value;
  ReadCompute<D, Interp> border_value[C];
  for (int c = 0; c < C; ++c) border_value[c] = from_value<R>(border_values[c]);
  detail::sample<C, Interp, Border, Keep>(detail::HwcFetch<D, C>{image}, g, image.width,
                                          image.height, x, y, border_value, out);
}

// ---------------------------------------------------------------------------------------------
// NV12.

// The YUV to RGB coefficients of a standard and range, folded: R = y' + rv * v', G = y' - gu *
// u' - gv * v', B = y' + bu * u', where y' = (Y - y_offset) * y_scale and u', v' = (U or V - 128)
// * c_scale. Computed in double from Kr, Kb, rounded once to float.
template <int Standard, bool FullRange>
struct YuvMatrix {
  static constexpr double kr = Standard == color_standard::bt709 ? 0.2126 : 0.299;
  static constexpr double kb = Standard == color_standard::bt709 ? 0.0722 : 0.114;
  static constexpr double kg = 1.0 - kr - kb;
  static constexpr double c_scale = FullRange ? 1.0 : 255.0 / 224.0;
  static constexpr float y_offset = FullRange ? 0.0f : 16.0f;
  static constexpr float y_scale = static_cast<float>(FullRange ? 1.0 : 255.0 / 219.0);
  static constexpr float rv = static_cast<float>(2.0 * (1.0 - kr) * c_scale);
  static constexpr float gu = static_cast<float>(2.0 * kb * (1.0 - kb) / kg * c_scale);
  static constexpr float gv = static_cast<float>(2.0 * kr * (1.0 - kr) / kg * c_scale);
  static constexpr float bu = static_cast<float>(2.0 * (1.0 - kb) * c_scale);
};

KF_HOST_DEVICE float clamp_0_255(float v) { return v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v); }

// RGB (0..255, f32) of luma Y and chroma U, V.
template <int Standard, bool FullRange>
KF_HOST_DEVICE void yuv_to_rgb(long long y_value, long long u_value, long long v_value,
                               float* rgb) {
  using M = YuvMatrix<Standard, FullRange>;
  const float y = mul_rn(static_cast<float>(y_value) - M::y_offset, M::y_scale);
  const float u = static_cast<float>(u_value - 128);
  const float v = static_cast<float>(v_value - 128);
  rgb[0] = clamp_0_255(add_rn(y, mul_rn(M::rv, v)));
  rgb[1] = clamp_0_255(sub_rn(sub_rn(y, mul_rn(M::gu, u)), mul_rn(M::gv, v)));
  rgb[2] = clamp_0_255(add_rn(y, mul_rn(M::bu, u)));
}

namespace detail {

template <int Standard, bool FullRange>
struct Nv12Fetch {
  using value_type = float;
  const ImageView& frame;
  KF_HOST_DEVICE void operator()(long long ix, long long iy, float* rgb) const {
    const unsigned char* p = static_cast<const unsigned char*>(frame.data);
    const long long luma = p[iy * frame.row_stride + ix * frame.col_stride];
    const long long chroma_row = frame.height + (iy >> 1);
    const long long chroma_col = ix & ~1LL;
    const long long base = chroma_row * frame.row_stride + chroma_col * frame.col_stride;
    const long long u = p[base];
    const long long v = p[base + frame.col_stride];
    yuv_to_rgb<Standard, FullRange>(luma, u, v, rgb);
  }
};

}  // namespace detail

// Output pixel (x, y) of a read of an NV12 frame: 3 floats, RGB on a 0..255 scale. border_values
// holds 3 launch values (RGB).
template <int Interp, int Border, bool Keep, int Standard, bool FullRange>
KF_HOST_DEVICE void read_nv12(const ImageView& frame, const ReadGeometry& g, int x, int y,
                              const double* border_values, float* out) {
  float border_value[3];
  for (int c = 0; c < 3; ++c) border_value[c] = static_cast<float>(border_values[c]);
  detail::sample<3, Interp, Border, Keep>(detail::Nv12Fetch<Standard, FullRange>{frame}, g,
                                          frame.width, frame.height, x, y, border_value, out);
}

// ---------------------------------------------------------------------------------------------
// Pixel operations.

// Channels in and out of a conversion, and the dtype of its result for input dtype D: swaps,
// drops and appends keep D; gray of an integer value is f32 (floating values keep their dtype).
template <int Conv>
struct ColorShape {
  static constexpr int in =
      (Conv == color::rgba_to_bgra || Conv == color::rgba_to_rgb || Conv == color::rgba_to_bgr) ? 4
                                                                                                : 3;
  static constexpr int out =
      (Conv == color::rgb_to_gray || Conv == color::bgr_to_gray) ? 1
      : (Conv == color::rgba_to_bgra || Conv == color::rgb_to_rgba || Conv == color::bgr_to_rgba)
          ? 4
          : 3;
};
template <int Conv, int D>
struct ColorDtype {
  static constexpr bool gray = Conv == color::rgb_to_gray || Conv == color::bgr_to_gray;
  static constexpr int value = (gray && !DtypeTraits<D>::floating) ? dtype::f32 : D;
};

// in: ColorShape<Conv>::in values of dtype D; out: ColorShape<Conv>::out values of
// ColorDtype<Conv, D>. alpha: the launch value of RGB-to-RGBA conversions (ignored otherwise).
// Gray is 0.299 R + 0.587 G + 0.114 B, in f32 (f64 for f64), summed left to right.
template <int Conv, int D>
KF_HOST_DEVICE void color_convert(const Compute<D>* in, double alpha,
                                  Compute<ColorDtype<Conv, D>::value>* out) {
  using R = Compute<ColorDtype<Conv, D>::value>;
  if constexpr (Conv == color::rgb_to_gray || Conv == color::bgr_to_gray) {
    const int r = Conv == color::rgb_to_gray ? 0 : 2, b = 2 - r;
    const R gray = add_rn(
        add_rn(mul_rn(R(0.299), static_cast<R>(in[r])), mul_rn(R(0.587), static_cast<R>(in[1]))),
        mul_rn(R(0.114), static_cast<R>(in[b])));
    out[0] = gray;
  } else if constexpr (Conv == color::rgb_to_bgr || Conv == color::rgba_to_bgra ||
                       Conv == color::rgba_to_bgr || Conv == color::bgr_to_rgba) {
    const Compute<D> r = in[0], g = in[1], b = in[2];
    out[0] = b;
    out[1] = g;
    out[2] = r;
    if constexpr (Conv == color::rgba_to_bgra) out[3] = in[3];
    if constexpr (Conv == color::bgr_to_rgba) out[3] = from_value<D>(alpha);
  } else if constexpr (Conv == color::rgba_to_rgb) {
    out[0] = in[0];
    out[1] = in[1];
    out[2] = in[2];
  } else {
    static_assert(Conv == color::rgb_to_rgba, "color_convert: unknown conversion");
    out[0] = in[0];
    out[1] = in[1];
    out[2] = in[2];
    out[3] = from_value<D>(alpha);
  }
}

// The dtype of a normalisation of a value of dtype D: f64 for f64, else f32.
template <int D>
struct NormalizeDtype {
  static constexpr int value = D == dtype::f64 ? dtype::f64 : dtype::f32;
};
template <int D>
using NormalizeCompute = Compute<NormalizeDtype<D>::value>;

// (x * scale - mean) / std for one channel, in f32 (f64 for f64 values); scale, mean and std are
// the node's launch values (as doubles, rounded once to the compute type).
template <int D>
KF_HOST_DEVICE NormalizeCompute<D> normalize(Compute<D> x, double scale, double mean, double std) {
  using T = NormalizeCompute<D>;
  return div_rn(sub_rn(mul_rn(static_cast<T>(x), static_cast<T>(scale)), static_cast<T>(mean)),
                static_cast<T>(std));
}

}  // namespace math
}  // namespace kf
