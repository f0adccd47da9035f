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
//      Each is read_image_at / read_nv12_at of the pixel's two AxisSamples (axis_sample_x(x),
//      axis_sample_y(y): source indices through the borders and the bilinear weight of one
//      column, one row), which the generated kernels compute once per column and once per row.
//   3. color_convert<Conv, D>, normalize<D> (normalize_v: with the fast division path of
//      fusion_ops.hpp) transform pixel values.
//
// Coordinates. Output pixel x of an item with crop (cx, cy, cw, ch) and content rectangle
// (px, py, pw, ph) (the whole output without keep-aspect):
//   - outside the content rectangle (keep-aspect only): every channel is the border value;
//   - no resize: crop column x - px, i.e. source column cx + x;
//   - nearest: crop column floor((x - px + 0.5) * cw / pw), clamped into [0, cw);
//   - bilinear: crop coordinate u = (x - px + 0.5) * cw / pw - 0.5 (half-pixel centres), the
//     two columns floor(u) and floor(u) + 1 weighted by the fraction of u, in f32 for every
//     image dtype (AxisSample::weight; an f64 image's pixels are blended in f64 with that
//     weight).
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
#if KF_DEVICE_CODE
  // Computed here, once per item: without this the compiler moved the divisions into the
  // kernels' pixel loops.
  asm volatile("" : "+f"(g.scale_x), "+f"(g.scale_y));
#endif
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

// One axis of a read at output coordinate o (a column x or a row y): the source indices the read
// takes on that axis, through both border levels (-1: the border value), and for bilinear the
// weight of the second. A read of pixel (x, y) is the pair (axis_sample_x(x), axis_sample_y(y)):
// a kernel computes each column's sample once and each row's once per row.
struct AxisSample {
  long long i0;  // none, nearest: the source index; bilinear: the first of the two
  long long i1;  // bilinear: the second (else unused)
  float weight;  // bilinear: the weight of i1, in f32 (i0's is 1 - weight, in the read's type)
  bool outside;  // keep-aspect: o lies outside the content rectangle (every channel the border)
};

// The sample of output coordinate o on an axis whose crop starts at crop_origin and spans
// crop_size source pixels of image_size, resized to content_size output pixels from
// content_origin on (scale = crop_size / content_size, as make_read_geometry computes it).
template <int Interp, int Border, bool Keep>
KF_HOST_DEVICE AxisSample axis_sample(int o, int content_origin, int content_size, float scale,
                                      int crop_origin, int crop_size, int image_size) {
  AxisSample s;
  s.i1 = -1;
  s.weight = 0.0f;
  s.outside = false;
  const int oc = o - content_origin;
  if (Keep && Interp != interp::none && (oc < 0 || oc >= content_size)) {
    s.outside = true;
    s.i0 = -1;
    return s;
  }
  if constexpr (Interp == interp::none) {
    s.i0 = source_index<Border>(o, crop_origin, crop_size, image_size);
  } else if constexpr (Interp == interp::nearest) {
    // floor((oc + 0.5) * crop_size / content_size) exactly, in integers (oc >= 0 here). In f32,
    // through the rounded scale, the product fell just below the whole numbers it should reach:
    // a crop of 4 resized to 47 read pixel 1, not 2, at output 23 (23.5 * 4 / 47 = 2).
    long long i = (2LL * oc + 1) * crop_size / (2LL * content_size);
    i = i < 0 ? 0 : (i >= crop_size ? crop_size - 1 : i);
    s.i0 = source_index<Border>(i, crop_origin, crop_size, image_size);
  } else {
    static_assert(Interp == interp::bilinear, "read: unknown interpolation");
    // u = (o + 0.5) * scale - 0.5 in f32 (every step rounded); the weight u - floor(u).
    const float u = sub_rn(mul_rn(static_cast<float>(oc) + 0.5f, scale), 0.5f);
    const float u0 = floorf(u);
    s.weight = sub_rn(u, u0);
    const long long i = static_cast<long long>(u0);
    s.i0 = source_index<Border>(i, crop_origin, crop_size, image_size);
    s.i1 = source_index<Border>(i + 1, crop_origin, crop_size, image_size);
  }
  return s;
}

#if KF_DEVICE_CODE
// Lane `lane`'s sample, to every lane of the warp (all 32 lanes must call it): a kernel's lanes
// compute the samples of 32 rows at once and take them in turn. Interpolations other than
// bilinear use i0 and outside only.
template <int Interp>
KF_HOST_DEVICE AxisSample shuffle_sample(const AxisSample& s, int lane) {
  AxisSample r;
  r.i0 = __shfl_sync(0xffffffffu, s.i0, lane);
  r.outside = __shfl_sync(0xffffffffu, static_cast<int>(s.outside), lane) != 0;
  if constexpr (Interp == interp::bilinear) {
    r.i1 = __shfl_sync(0xffffffffu, s.i1, lane);
    r.weight = __shfl_sync(0xffffffffu, s.weight, lane);
  } else {
    r.i1 = -1;
    r.weight = 0.0f;
  }
  return r;
}
#endif

template <int Interp, int Border, bool Keep>
KF_HOST_DEVICE AxisSample axis_sample_x(const ReadGeometry& g, int x, int image_width) {
  return axis_sample<Interp, Border, Keep>(x, g.content_x, g.content_w, g.scale_x, g.crop_x,
                                           g.crop_w, image_width);
}
template <int Interp, int Border, bool Keep>
KF_HOST_DEVICE AxisSample axis_sample_y(const ReadGeometry& g, int y, int image_height) {
  return axis_sample<Interp, Border, Keep>(y, g.content_y, g.content_h, g.scale_y, g.crop_y,
                                           g.crop_h, image_height);
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
    for (int c = 0; c < C; ++c) out[c] = load_input<D>(image.data, base + c * image.channel_stride);
  }
};

// The C channels of source pixel (ix, iy) (indices from source_index), or the border values
// when either is -1 (only a constant border gives -1).
template <int C, int Border, class Fetch, class T>
KF_HOST_DEVICE void fetch_source_pixel(const Fetch& fetch, long long ix, long long iy,
                                       const T* border_value, T* out) {
  if (Border == border::constant && (ix < 0 || iy < 0)) {
    for (int c = 0; c < C; ++c) out[c] = border_value[c];
    return;
  }
  typename Fetch::value_type v[C];
  fetch(ix, iy, v);
  for (int c = 0; c < C; ++c) out[c] = static_cast<T>(v[c]);
}

// The C channels of output pixel (sx, sy) from its two axis samples (see AxisSample): the
// border values outside a letterbox's content, else the source pixel (no resize, nearest) or
// the bilinear blend of the four, weights in T.
template <int C, int Interp, int Border, bool Keep, class T, class Fetch>
KF_HOST_DEVICE void sample_at(const Fetch& fetch, const AxisSample& sx, const AxisSample& sy,
                              const T* border_value, T* out) {
  if (Keep && Interp != interp::none && (sx.outside || sy.outside)) {
    for (int c = 0; c < C; ++c) out[c] = border_value[c];
    return;
  }
  if constexpr (Interp != interp::bilinear) {
    fetch_source_pixel<C, Border>(fetch, sx.i0, sy.i0, border_value, out);
  } else {
    const T ax = static_cast<T>(sx.weight), ay = static_cast<T>(sy.weight);
    const T bx = sub_rn(T(1), ax), by = sub_rn(T(1), ay);
    T p00[C], p10[C], p01[C], p11[C];
    fetch_source_pixel<C, Border>(fetch, sx.i0, sy.i0, border_value, p00);
    fetch_source_pixel<C, Border>(fetch, sx.i1, sy.i0, border_value, p10);
    fetch_source_pixel<C, Border>(fetch, sx.i0, sy.i1, border_value, p01);
    fetch_source_pixel<C, Border>(fetch, sx.i1, sy.i1, border_value, p11);
    for (int c = 0; c < C; ++c) {
      const T top = add_rn(mul_rn(p00[c], bx), mul_rn(p10[c], ax));
      const T bottom = add_rn(mul_rn(p01[c], bx), mul_rn(p11[c], ax));
      out[c] = add_rn(mul_rn(top, by), mul_rn(bottom, ay));
    }
  }
}

}  // namespace detail

// Output pixel (sx, sy) of a read of an HWC image of dtype D with C channels, from the column's
// and the row's axis samples. border_value holds the C border values in the read's compute type
// (from_value<ReadDtype> of the launch values); out receives C values of that type.
template <int D, int C, int Interp, int Border, bool Keep>
KF_HOST_DEVICE void read_image_at(const ImageView& image, const AxisSample& sx,
                                  const AxisSample& sy, const ReadCompute<D, Interp>* border_value,
                                  ReadCompute<D, Interp>* out) {
  detail::sample_at<C, Interp, Border, Keep>(detail::HwcFetch<D, C>{image}, sx, sy, border_value,
                                             out);
}

// Output pixel (x, y) of a read of an HWC image: read_image_at of its two axis samples.
// border_values holds C launch values (as doubles).
template <int D, int C, int Interp, int Border, bool Keep>
KF_HOST_DEVICE void read_image(const ImageView& image, const ReadGeometry& g, int x, int y,
                               const double* border_values, ReadCompute<D, Interp>* out) {
  constexpr int R = ReadDtype<D, Interp>::value;
  ReadCompute<D, Interp> border_value[C];
  for (int c = 0; c < C; ++c) border_value[c] = from_value<R>(border_values[c]);
  read_image_at<D, C, Interp, Border, Keep>(
      image, axis_sample_x<Interp, Border, Keep>(g, x, image.width),
      axis_sample_y<Interp, Border, Keep>(g, y, image.height), border_value, out);
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
    const void* p = frame.data;
    const long long luma = load_input<dtype::u8>(p, iy * frame.row_stride + ix * frame.col_stride);
    const long long chroma_row = frame.height + (iy >> 1);
    const long long chroma_col = ix & ~1LL;
    const long long base = chroma_row * frame.row_stride + chroma_col * frame.col_stride;
    const long long u = load_input<dtype::u8>(p, base);
    const long long v = load_input<dtype::u8>(p, base + frame.col_stride);
    yuv_to_rgb<Standard, FullRange>(luma, u, v, rgb);
  }
};

}  // namespace detail

// Output pixel (sx, sy) of a read of an NV12 frame: 3 floats, RGB on a 0..255 scale.
// border_value holds the 3 border values (RGB) as floats.
template <int Interp, int Border, bool Keep, int Standard, bool FullRange>
KF_HOST_DEVICE void read_nv12_at(const ImageView& frame, const AxisSample& sx, const AxisSample& sy,
                                 const float* border_value, float* out) {
  detail::sample_at<3, Interp, Border, Keep>(detail::Nv12Fetch<Standard, FullRange>{frame}, sx, sy,
                                             border_value, out);
}

// Output pixel (x, y) of a read of an NV12 frame; border_values holds 3 launch values (RGB).
template <int Interp, int Border, bool Keep, int Standard, bool FullRange>
KF_HOST_DEVICE void read_nv12(const ImageView& frame, const ReadGeometry& g, int x, int y,
                              const double* border_values, float* out) {
  float border_value[3];
  for (int c = 0; c < 3; ++c) border_value[c] = static_cast<float>(border_values[c]);
  read_nv12_at<Interp, Border, Keep, Standard, FullRange>(
      frame, axis_sample_x<Interp, Border, Keep>(g, x, frame.width),
      axis_sample_y<Interp, Border, Keep>(g, y, frame.height), border_value, out);
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

// normalize<D>, with scale and mean already in the compute type (static_cast of the launch
// values, as normalize does) and std prepared as a Divisor, with the fast division path when Fast
// and the compute type is f32 (recorded in ok; see fusion_ops.hpp).
template <bool Fast, int D>
KF_HOST_DEVICE NormalizeCompute<D> normalize_v(Compute<D> x, NormalizeCompute<D> scale,
                                               NormalizeCompute<D> mean,
                                               const Divisor<NormalizeCompute<D>>& std,
                                               FastCheck& ok) {
  using T = NormalizeCompute<D>;
  const T centred = sub_rn(mul_rn(static_cast<T>(x), scale), mean);
  if constexpr (Fast && KF_DEVICE_CODE && sizeof(T) == sizeof(float)) {
    return fast::div(centred, std, ok);
  } else {
    (void)ok;
    return div_rn(centred, std.value);
  }
}

}  // namespace math
}  // namespace kf
