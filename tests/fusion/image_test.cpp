// Image pipelines of the fusion engine against a straightforward reference that materialises
// every step in float64: the crop (image-space borders), the resize or letterbox of the crop
// (crop-space borders), the colour conversion, the normalisation, the write. Covers every
// interpolation, border mode and letterbox, u8 and f32 (also f16, f64) images of 1, 3 and 4
// channels, NV12 in
// BT.601/BT.709 video and full range, every colour conversion, as-is / planar / batched outputs,
// and 50 crops of one frame in one launch. Coordinates follow graph.h / core/math/image.hpp:
// the documented f32 steps of bilinear reads (scale, sample positions) are computed the same way
// here, nearest reads' source pixels exactly, the values in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/fusion/fusion_test_util.hpp"

#if defined(KF_TEST_CUDA)
#include <cuda_runtime.h>
#endif

namespace {

using fusion_test::Builder;
using fusion_test::DeviceTensor;
using fusion_test::Num;
using fusion_test::Shape;

// An HWC image of doubles.
struct Img {
  int h = 0, w = 0, c = 0;
  std::vector<double> v;
  Img() = default;
  Img(int height, int width, int channels, double fill = 0.0)
      : h(height), w(width), c(channels), v(static_cast<size_t>(height) * width * channels, fill) {}
  double& at(int x, int y, int ch) { return v[(static_cast<size_t>(y) * w + x) * c + ch]; }
  double at(int x, int y, int ch) const { return v[(static_cast<size_t>(y) * w + x) * c + ch]; }
};

// Index i on an axis of n pixels: -1 for the border value.
int64_t border_index(kf_border_t mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  if (mode == KF_BORDER_CONSTANT) return -1;
  if (mode == KF_BORDER_REPLICATE) return i < 0 ? 0 : n - 1;
  if (n == 1) return 0;
  // Reflect 101, by walking: bounce off the edges until inside.
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
  return i;
}

// Pixel (x, y) of img under the border rule; border values per channel.
std::vector<double> sample(const Img& img, int64_t x, int64_t y, kf_border_t mode,
                           const std::vector<double>& border) {
  const int64_t ix = border_index(mode, x, img.w), iy = border_index(mode, y, img.h);
  if (ix < 0 || iy < 0) return border;
  std::vector<double> p(static_cast<size_t>(img.c));
  for (int ch = 0; ch < img.c; ++ch) p[ch] = img.at(static_cast<int>(ix), static_cast<int>(iy), ch);
  return p;
}

// Step 1: the crop, materialised (reads outside the image follow the border rule).
Img crop(const Img& src, const kf_rect_t& r, kf_border_t mode, const std::vector<double>& border) {
  Img out(r.height, r.width, src.c);
  for (int y = 0; y < r.height; ++y)
    for (int x = 0; x < r.width; ++x) {
      const auto p = sample(src, int64_t{r.x} + x, int64_t{r.y} + y, mode, border);
      for (int ch = 0; ch < src.c; ++ch) out.at(x, y, ch) = p[ch];
    }
  return out;
}

// Step 2: resize the crop to w x h (reads outside the crop follow the border rule again).
Img resize(const Img& src, int w, int h, kf_interpolation_t interp, kf_border_t mode,
           const std::vector<double>& border) {
  Img out(h, w, src.c);
  const float sx = static_cast<float>(src.w) / static_cast<float>(w);
  const float sy = static_cast<float>(src.h) / static_cast<float>(h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      std::vector<double> p;
      if (interp == KF_INTERP_NONE) {
        p = sample(src, x, y, mode, border);
      } else if (interp == KF_INTERP_NEAREST) {
        // floor((x + 0.5) * src.w / w), exactly.
        const int64_t i =
            std::clamp<int64_t>((2 * int64_t{x} + 1) * src.w / (2 * int64_t{w}), 0, src.w - 1);
        const int64_t j =
            std::clamp<int64_t>((2 * int64_t{y} + 1) * src.h / (2 * int64_t{h}), 0, src.h - 1);
        p = sample(src, i, j, mode, border);
      } else {
        const float u = (static_cast<float>(x) + 0.5f) * sx - 0.5f;
        const float v = (static_cast<float>(y) + 0.5f) * sy - 0.5f;
        const double i0 = std::floor(u), j0 = std::floor(v);
        const double a = u - i0, b = v - j0;
        const int64_t i = static_cast<int64_t>(i0), j = static_cast<int64_t>(j0);
        const auto p00 = sample(src, i, j, mode, border), p10 = sample(src, i + 1, j, mode, border);
        const auto p01 = sample(src, i, j + 1, mode, border);
        const auto p11 = sample(src, i + 1, j + 1, mode, border);
        p.resize(static_cast<size_t>(src.c));
        for (int ch = 0; ch < src.c; ++ch)
          p[ch] =
              (1 - b) * ((1 - a) * p00[ch] + a * p10[ch]) + b * ((1 - a) * p01[ch] + a * p11[ch]);
      }
      for (int ch = 0; ch < src.c; ++ch) out.at(x, y, ch) = p[ch];
    }
  return out;
}

// Step 2 with keep-aspect: resize to the largest size of the crop's aspect that fits (the other
// side rounded half up), centred, the rest of the output the border value.
Img letterbox(const Img& src, int w, int h, kf_interpolation_t interp, kf_border_t mode,
              const std::vector<double>& border) {
  int content_w = w, content_h = h;
  if (int64_t{src.w} * h >= int64_t{src.h} * w)
    content_h = std::clamp(static_cast<int>(std::floor(double(src.h) * w / src.w + 0.5)), 1, h);
  else
    content_w = std::clamp(static_cast<int>(std::floor(double(src.w) * h / src.h + 0.5)), 1, w);
  const Img content = resize(src, content_w, content_h, interp, mode, border);
  Img out(h, w, src.c);
  const int x0 = (w - content_w) / 2, y0 = (h - content_h) / 2;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < src.c; ++ch) {
        const bool inside = x >= x0 && x < x0 + content_w && y >= y0 && y < y0 + content_h;
        out.at(x, y, ch) = inside ? content.at(x - x0, y - y0, ch) : border[ch];
      }
  return out;
}

// Step 3: a colour conversion.
Img convert(const Img& src, kf_color_conversion_t conversion, double alpha) {
  const bool gray = conversion == KF_COLOR_RGB_TO_GRAY || conversion == KF_COLOR_BGR_TO_GRAY;
  const bool append = conversion == KF_COLOR_RGB_TO_RGBA || conversion == KF_COLOR_BGR_TO_RGBA;
  const bool swap = conversion == KF_COLOR_RGB_TO_BGR || conversion == KF_COLOR_RGBA_TO_BGRA ||
                    conversion == KF_COLOR_RGBA_TO_BGR || conversion == KF_COLOR_BGR_TO_RGBA;
  const int out_c = gray ? 1 : append || conversion == KF_COLOR_RGBA_TO_BGRA ? 4 : 3;
  Img out(src.h, src.w, out_c);
  for (int y = 0; y < src.h; ++y)
    for (int x = 0; x < src.w; ++x) {
      if (gray) {
        const int r = conversion == KF_COLOR_RGB_TO_GRAY ? 0 : 2;
        out.at(x, y, 0) =
            0.299 * src.at(x, y, r) + 0.587 * src.at(x, y, 1) + 0.114 * src.at(x, y, 2 - r);
        continue;
      }
      for (int ch = 0; ch < 3; ++ch) out.at(x, y, ch) = src.at(x, y, swap ? 2 - ch : ch);
      if (out_c == 4) out.at(x, y, 3) = append ? alpha : src.at(x, y, 3);
    }
  return out;
}

// Step 4: (x * scale - mean) / std per channel.
Img normalize(Img img, double scale, const std::vector<double>& mean,
              const std::vector<double>& std) {
  for (size_t k = 0; k < img.v.size(); ++k) {
    const size_t ch = k % static_cast<size_t>(img.c);
    img.v[k] = (img.v[k] * scale - mean[ch]) / std[ch];
  }
  return img;
}

// NV12 to RGB, per pixel, clamped to [0, 255].
Img nv12_to_rgb(const std::vector<Num>& frame, int h, int w, kf_color_standard_t standard,
                bool full_range) {
  const double kr = standard == KF_COLOR_BT709 ? 0.2126 : 0.299;
  const double kb = standard == KF_COLOR_BT709 ? 0.0722 : 0.114;
  const double kg = 1 - kr - kb;
  Img out(h, w, 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const double luma = static_cast<double>(frame[static_cast<size_t>(y) * w + x].i);
      const size_t uv = static_cast<size_t>(h + y / 2) * w + static_cast<size_t>(x / 2 * 2);
      double u = static_cast<double>(frame[uv].i) - 128,
             v = static_cast<double>(frame[uv + 1].i) - 128;
      double yy = luma;
      if (!full_range) {
        yy = (luma - 16) * 255 / 219;
        u *= 255.0 / 224;
        v *= 255.0 / 224;
      }
      const double rgb[3] = {yy + 2 * (1 - kr) * v,
                             yy - 2 * kb * (1 - kb) / kg * u - 2 * kr * (1 - kr) / kg * v,
                             yy + 2 * (1 - kb) * u};
      for (int ch = 0; ch < 3; ++ch) out.at(x, y, ch) = std::clamp(rgb[ch], 0.0, 255.0);
    }
  return out;
}

// Random nonzero pixels of dtype d (u8 1..255, f32 with fractions).
std::vector<Num> random_pixels(kf_dtype_t d, size_t n, std::mt19937_64& rng) {
  std::vector<Num> v(n);
  for (Num& p : v) {
    if (d == KF_DTYPE_UINT8)
      p.i = 1 + static_cast<int64_t>(rng() % 255);
    else
      p.f = fusion_test::round_to(d, 0.5 + std::uniform_real_distribution<double>(0, 254)(rng));
  }
  return v;
}

Img to_img(const std::vector<Num>& values, kf_dtype_t d, int h, int w, int c) {
  Img img(h, w, c);
  for (size_t k = 0; k < values.size(); ++k)
    img.v[k] = fusion_test::is_integer(d) ? static_cast<double>(values[k].i) : values[k].f;
  return img;
}

// Compares an output (row-major in its own layout) with a reference image in that layout.
// A crop read with the given interpolation and border (the other fields at their defaults).
kf_image_read_desc_t crop_read(kf_interpolation_t interp, kf_border_t border) {
  kf_image_read_desc_t desc = KF_IMAGE_READ_DESC_INIT;
  desc.crop = 1;
  desc.interpolation = interp;
  desc.border = border;
  return desc;
}

// Item i's values of a batched output of per_item values per item.
std::vector<Num> item_values(const std::vector<Num>& all, int i, size_t per_item) {
  const auto first = all.begin() + static_cast<int64_t>(static_cast<size_t>(i) * per_item);
  return std::vector<Num>(first, first + static_cast<int64_t>(per_item));
}

void expect_image(const std::vector<Num>& got, kf_dtype_t d, const Img& want, bool planar,
                  double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.v.size()) << what;
  size_t bad = 0;
  for (int y = 0; y < want.h; ++y)
    for (int x = 0; x < want.w; ++x)
      for (int ch = 0; ch < want.c; ++ch) {
        const size_t k = planar ? (static_cast<size_t>(ch) * want.h + y) * want.w + x
                                : (static_cast<size_t>(y) * want.w + x) * want.c + ch;
        const double g = fusion_test::is_integer(d) ? static_cast<double>(got[k].i) : got[k].f;
        const double r = want.at(x, y, ch);
        if (!(std::fabs(g - r) <= tolerance * std::max(1.0, std::fabs(r))) && bad++ < 5)
          ADD_FAILURE() << what << ": pixel (" << x << ", " << y << ") channel " << ch << ": got "
                        << g << ", want " << r;
      }
  EXPECT_EQ(bad, 0u) << what;
}

// The reference of a read: crop, then resize / letterbox / pass through.
Img read_reference(const Img& src, const kf_rect_t& r, int w, int h, const kf_image_read_desc_t& d,
                   const std::vector<double>& border) {
  const Img cropped = crop(src, r, d.border, border);
  if (d.keep_aspect_ratio) return letterbox(cropped, w, h, d.interpolation, d.border, border);
  return resize(cropped, w, h, d.interpolation, d.border, border);
}

class ImageTest : public row_test::DeviceTest {
 protected:
  std::mt19937_64 rng{row_test::base_seed()};

  DeviceTensor upload_image(const std::vector<Num>& pixels, kf_dtype_t d, const Shape& shape,
                            bool strided) {
    DeviceTensor t = fusion_test::make_tensor(ctx(), d, shape, strided, rng);
    fusion_test::upload(t, pixels);
    return t;
  }
  DeviceTensor output(kf_dtype_t d, const Shape& shape) {
    DeviceTensor t = fusion_test::make_tensor(ctx(), d, shape, rng() % 2 == 0, rng);
    fusion_test::poison(t);
    return t;
  }
  kf_rect_t random_crop(int h, int w) {
    kf_rect_t r;
    r.width = 1 + static_cast<int32_t>(rng() % static_cast<uint64_t>(w));
    r.height = 1 + static_cast<int32_t>(rng() % static_cast<uint64_t>(h));
    // Mostly inside, sometimes hanging over any edge.
    r.x = static_cast<int32_t>(rng() % static_cast<uint64_t>(w + 8)) - 4;
    r.y = static_cast<int32_t>(rng() % static_cast<uint64_t>(h + 8)) - 4;
    return r;
  }
  void launch_ok(kf_fused_kernel_t* k, int32_t n_items,
                 const std::vector<const kf_tensor_t*>& inputs,
                 const std::vector<kf_tensor_t*>& outputs, const std::vector<kf_rect_t>& crops,
                 const std::vector<kf_fused_value_t>& values = {}) {
    KF_ASSERT_OK(fusion_test::launch(k, n_items, inputs, outputs, crops, values));
  }
};

// Crop -> resize (every interpolation, border and letterbox) -> colour -> normalise -> batched
// planar f32, plus the raw read of every item as-is, for u8 and f32 images of 1, 3, 4 channels
// (and, in rotation, f16 and f64 images: f64 reads and normalisation stay f64).
TEST_F(ImageTest, CropResizeConvertNormalize) {
  const int H = 29, W = 37, kItems = 3;
  int variant = 0;
  for (kf_interpolation_t interp : {KF_INTERP_NONE, KF_INTERP_NEAREST, KF_INTERP_BILINEAR})
    for (kf_border_t border : {KF_BORDER_CONSTANT, KF_BORDER_REPLICATE, KF_BORDER_REFLECT})
      for (int keep = 0; keep <= (interp == KF_INTERP_NONE ? 0 : 1); ++keep, ++variant) {
        const kf_dtype_t dtype = std::vector<kf_dtype_t>{
            KF_DTYPE_UINT8,   KF_DTYPE_FLOAT32, KF_DTYPE_UINT8,
            KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16, KF_DTYPE_FLOAT64}[variant % 6];
        const kf_dtype_t float_dtype = dtype == KF_DTYPE_FLOAT64 ? dtype : KF_DTYPE_FLOAT32;
        const int channels = std::vector<int>{3, 1, 4}[variant % 3];
        const kf_color_conversion_t conversion =
            channels == 4 ? KF_COLOR_RGBA_TO_BGR
                          : (variant % 4 < 2 ? KF_COLOR_RGB_TO_BGR : KF_COLOR_BGR_TO_GRAY);
        const bool convert_color = channels != 1;
        SCOPED_TRACE("variant " + std::to_string(variant) + ": " + row_test::dtype_name(dtype) +
                     " x" + std::to_string(channels) + ", interpolation " + std::to_string(interp) +
                     ", border " + std::to_string(border) + ", keep-aspect " +
                     std::to_string(keep));
        kf_image_read_desc_t desc = crop_read(interp, border);
        desc.keep_aspect_ratio = keep;
        desc.border_value = 7.0;

        fusion_test::GraphHandle g(ctx());
        Builder b{g};
        const int32_t image = b.image(dtype, channels);
        const int32_t read = b.read(image, desc);
        const int32_t converted = convert_color ? b.color(read, conversion) : read;
        const int out_c = !convert_color ? 1 : conversion == KF_COLOR_BGR_TO_GRAY ? 1 : 3;
        const std::vector<double> mean = {0.485 * 255, 0.456 * 255, 0.406 * 255};
        const std::vector<double> stdev = {0.229 * 255, 0.224 * 255, 0.225 * 255};
        const int32_t normalized =
            b.normalize(converted, 1.0, std::vector<double>(mean.begin(), mean.begin() + out_c),
                        std::vector<double>(stdev.begin(), stdev.begin() + out_c));
        b.output(normalized, KF_OUTPUT_PLANAR, true);
        b.output(read);
        fusion_test::KernelHandle k = fusion_test::compile(g, kItems);
        ASSERT_NE(k.k, nullptr);

        const std::vector<Num> pixels =
            random_pixels(dtype, static_cast<size_t>(H) * W * channels, rng);
        const DeviceTensor frame = upload_image(pixels, dtype, {H, W, channels}, variant % 3 == 0);
        const int out_h = 5 + static_cast<int>(rng() % 20),
                  out_w = 5 + static_cast<int>(rng() % 20);
        const kf_dtype_t read_dtype = interp == KF_INTERP_BILINEAR ? float_dtype : dtype;
        DeviceTensor batched = output(float_dtype, {kItems, out_c, out_h, out_w});
        std::vector<DeviceTensor> raw;
        std::vector<kf_rect_t> crops;
        std::vector<const kf_tensor_t*> inputs;
        std::vector<kf_tensor_t*> outputs;
        for (int i = 0; i < kItems; ++i) {
          crops.push_back(random_crop(H, W));
          raw.push_back(output(read_dtype, {out_h, out_w, channels}));
          inputs.push_back(frame.handle());
          outputs.push_back(batched.handle());
          outputs.push_back(raw.back().handle());
        }
        // Launch values: the border value of channel 0 (the others keep the default), and the
        // normalisation's scale and its last channel's mean and std.
        const std::vector<kf_fused_value_t> values = {{read, 0, 200.0},
                                                      {normalized, 0, 1.5},
                                                      {normalized, out_c, 100.0},
                                                      {normalized, 2 * out_c, 40.0}};
        std::vector<double> launch_mean = mean, launch_std = stdev;
        launch_mean[out_c - 1] = 100.0;
        launch_std[out_c - 1] = 40.0;
        launch_ok(k, kItems, inputs, outputs, crops, values);

        const Img src = to_img(pixels, dtype, H, W, channels);
        std::vector<double> border(static_cast<size_t>(channels), 7.0);
        border[0] = 200.0;
        const std::vector<Num> all = fusion_test::download(batched, "batched output");
        const size_t per_item = static_cast<size_t>(out_c) * out_h * out_w;
        for (int i = 0; i < kItems; ++i) {
          const std::string what = "item " + std::to_string(i) + " crop (" +
                                   std::to_string(crops[i].x) + ", " + std::to_string(crops[i].y) +
                                   ") " + std::to_string(crops[i].width) + "x" +
                                   std::to_string(crops[i].height) + " -> " +
                                   std::to_string(out_w) + "x" + std::to_string(out_h);
          const Img read_ref = read_reference(src, crops[i], out_w, out_h, desc, border);
          // u8 reads without interpolation are exact; bilinear values are f32.
          expect_image(fusion_test::download(raw[i], what), read_dtype, read_ref, false,
                       read_dtype == KF_DTYPE_UINT8 ? 0.0 : 2e-6, what + " (read)");
          const Img conv = convert_color ? convert(read_ref, conversion, 0) : read_ref;
          const Img norm = normalize(conv, 1.5, launch_mean, launch_std);
          const std::vector<Num> item = item_values(all, i, per_item);
          expect_image(item, float_dtype, norm, true, 2e-5, what + " (normalised)");
        }
        if (HasFailure()) return;
      }
}

// Nearest reads take crop pixel floor((x + 0.5) * crop_w / content_w) exactly, also where that is
// a whole number: in f32, through a rounded scale, a row of 4 resized to 47 read pixel 1 at
// output 23 (23.5 * 4 / 47 = 2). Plain and letterboxed (4 x 4 into 55 x 47), u8.
TEST_F(ImageTest, NearestReadsTheDocumentedPixelAtWholeNumbers) {
  struct Case {
    int out_w, out_h, keep;
  };
  for (const Case& c : {Case{47, 1, 0}, Case{55, 47, 1}, Case{94, 3, 0}}) {
    const int side = c.keep ? 4 : 1;
    SCOPED_TRACE("4x" + std::to_string(side) + " -> " + std::to_string(c.out_w) + "x" +
                 std::to_string(c.out_h) + (c.keep ? " letterboxed" : ""));
    kf_image_read_desc_t desc = KF_IMAGE_READ_DESC_INIT;
    desc.crop = 1;
    desc.interpolation = KF_INTERP_NEAREST;
    desc.keep_aspect_ratio = c.keep;
    desc.border_value = 99.0;
    fusion_test::GraphHandle g(ctx());
    Builder b{g};
    const int32_t read = b.read(b.image(KF_DTYPE_UINT8, 1), desc);
    b.output(read);
    fusion_test::KernelHandle k = fusion_test::compile(g, 1);
    ASSERT_NE(k.k, nullptr);
    std::vector<Num> pixels(static_cast<size_t>(4 * side));
    for (size_t p = 0; p < pixels.size(); ++p) pixels[p].i = pixels[p].f = 10 + static_cast<int>(p);
    const DeviceTensor frame = upload_image(pixels, KF_DTYPE_UINT8, {side, 4, 1}, false);
    DeviceTensor out = output(KF_DTYPE_UINT8, {c.out_h, c.out_w, 1});
    // A border value the u8 read cannot hold is refused at launch too.
    for (double v : {256.0, -1.0, 0.5}) {
      EXPECT_EQ(fusion_test::launch(k, 1, {frame.handle()}, {out.handle()},
                                    {kf_rect_t{0, 0, 4, side}}, {{read, 0, v}}),
                KF_ERROR_INVALID_ARGUMENT)
          << "border value " << v;
    }
    launch_ok(k, 1, {frame.handle()}, {out.handle()}, {kf_rect_t{0, 0, 4, side}});
    const std::vector<Num> got = fusion_test::download(out, "nearest read");
    // The content rectangle: the whole output, or the letterbox's centred square.
    const int content = c.keep ? std::min(c.out_w, c.out_h) : 0;
    const int cx = c.keep ? (c.out_w - content) / 2 : 0, cy = c.keep ? (c.out_h - content) / 2 : 0;
    const int cw = c.keep ? content : c.out_w, ch = c.keep ? content : c.out_h;
    for (int y = 0; y < c.out_h; ++y)
      for (int x = 0; x < c.out_w; ++x) {
        const int ox = x - cx, oy = y - cy;
        int64_t want = 99;
        if (ox >= 0 && ox < cw && oy >= 0 && oy < ch) {
          const int64_t i = (2 * int64_t{ox} + 1) * 4 / (2 * int64_t{cw});
          const int64_t j = (2 * int64_t{oy} + 1) * side / (2 * int64_t{ch});
          want = 10 + j * 4 + i;
        }
        EXPECT_EQ(got[static_cast<size_t>(y) * c.out_w + x].i, want)
            << "at (" << x << ", " << y << ")";
      }
  }
}

// An empty image (or NV12 frame) has no pixel for a replicate or reflect border to read: such
// reads indexed row or column -1 (bytes before the image) and the launch succeeded. Every
// border and interpolation refuses it; the output is left as it was.
TEST_F(ImageTest, EmptyImagesAreRefusedAtLaunch) {
  for (kf_border_t border : {KF_BORDER_CONSTANT, KF_BORDER_REPLICATE, KF_BORDER_REFLECT})
    for (kf_interpolation_t interp : {KF_INTERP_NONE, KF_INTERP_NEAREST, KF_INTERP_BILINEAR})
      for (int nv12 = 0; nv12 < 2; ++nv12) {
        SCOPED_TRACE("border " + std::to_string(border) + " interpolation " +
                     std::to_string(interp) + (nv12 ? " NV12" : " RGB"));
        kf_image_read_desc_t desc = KF_IMAGE_READ_DESC_INIT;
        desc.border = border;
        desc.interpolation = interp;
        fusion_test::GraphHandle g(ctx());
        Builder b{g};
        b.output(b.read(nv12 ? b.nv12() : b.image(KF_DTYPE_UINT8, 3), desc));
        fusion_test::KernelHandle k = fusion_test::compile(g, 1);
        ASSERT_NE(k.k, nullptr);
        const Shape empty_shapes[2][2] = {{{0, 5, 3}, {4, 0, 3}}, {{0, 4}, {6, 0}}};
        for (const Shape& shape : empty_shapes[nv12]) {
          const DeviceTensor frame =
              fusion_test::make_tensor(ctx(), KF_DTYPE_UINT8, shape, false, rng);
          // NV12 reads and bilinear reads of u8 give f32.
          const bool f32 = nv12 || interp == KF_INTERP_BILINEAR;
          DeviceTensor out = output(f32 ? KF_DTYPE_FLOAT32 : KF_DTYPE_UINT8, {2, 2, 3});
          const std::vector<Num> before = fusion_test::download(out, "poisoned");
          EXPECT_EQ(fusion_test::launch(k, 1, {frame.handle()}, {out.handle()}, {}),
                    KF_ERROR_SHAPE_MISMATCH)
              << kf_get_last_error_message();
          const std::vector<Num> after = fusion_test::download(out, "untouched");
          for (size_t i = 0; i < before.size(); ++i)
            EXPECT_EQ(std::memcmp(&before[i], &after[i], sizeof(Num)), 0) << "element " << i;
        }
      }
}

// Image kernels keep columns in 32-bit ints: an image or output with more than 2^29 rows or
// columns is refused at launch (KF_ERROR_NOT_SUPPORTED) instead of wrapping. Before, an output of
// width 2^30 + 1 was written 2 GiB before its memory and one just under 2^31 wide never ended.
// The wide image is a view of one pixel repeated (stride 0 along its rows and columns); the tall
// output is allocated (512 MiB) but never written.
TEST_F(ImageTest, SidesPastTwoToThe29AreRefusedAtLaunch) {
  constexpr int64_t kSide = int64_t{1} << 29;
  fusion_test::GraphHandle g(ctx());
  Builder b{g};
  kf_image_read_desc_t nearest = KF_IMAGE_READ_DESC_INIT;
  nearest.interpolation = KF_INTERP_NEAREST;  // resized to the output
  b.output(b.read(b.image(KF_DTYPE_UINT8, 1), nearest));
  fusion_test::KernelHandle k = fusion_test::compile(g, 1);
  ASSERT_NE(k.k, nullptr);
  Num seven;
  seven.i = 7;
  const DeviceTensor pixel = upload_image({seven}, KF_DTYPE_UINT8, {1, 1, 1}, false);
  DeviceTensor out = output(KF_DTYPE_UINT8, {3, 5, 1});
  for (int64_t side : {kSide, kSide + 1}) {
    for (int wide = 0; wide < 2; ++wide) {
      SCOPED_TRACE(std::string(wide ? "columns " : "rows ") + std::to_string(side));
      kf_tensor_desc_t view{};
      view.ndim = 3;
      view.shape[0] = wide ? 1 : side;
      view.shape[1] = wide ? side : 1;
      view.shape[2] = 1;
      view.strides[2] = 1;  // rows and columns 0: every pixel is the one pixel
      view.dtype = KF_DTYPE_UINT8;
      kf_tensor_t* image = nullptr;
      KF_ASSERT_OK(kf_tensor_create_view(pixel.handle(), &view, 0, &image));
      const kf_result_t r = fusion_test::launch(k, 1, {image}, {out.handle()}, {});
      if (side == kSide) {
        EXPECT_EQ(r, KF_SUCCESS) << kf_get_last_error_message();
      } else {
        EXPECT_EQ(r, KF_ERROR_NOT_SUPPORTED) << kf_get_last_error_message();
        EXPECT_NE(std::string(kf_get_last_error_message()).find("limited to 536870912 (2^29)"),
                  std::string::npos)
            << kf_get_last_error_message();
      }
      KF_ASSERT_OK(kf_tensor_destroy(image));
    }
  }
  // The repeated pixel resized to 3 x 5 is 7 everywhere.
  for (const Num& v : fusion_test::download(out, "resized")) EXPECT_EQ(v.i, 7);

  const kf_tensor_desc_t tall = kf_test::make_desc(KF_DTYPE_UINT8, {kSide + 1, 1, 1});
  kf_tensor_t* big = nullptr;
  KF_ASSERT_OK(kf_tensor_create(ctx(), &tall, &big));
  EXPECT_EQ(fusion_test::launch(k, 1, {pixel.handle()}, {big}, {}), KF_ERROR_NOT_SUPPORTED)
      << kf_get_last_error_message();
  KF_ASSERT_OK(kf_tensor_destroy(big));
}

// Every colour conversion on u8 and f32 pixels (3- and 4-channel images), with RGB-to-RGBA's
// alpha as default and as a launch value; a final u8 cast rounds gray values.
TEST_F(ImageTest, ColorConversions) {
  const int H = 9, W = 13;
  for (kf_dtype_t dtype : {KF_DTYPE_UINT8, KF_DTYPE_FLOAT32})
    for (int channels : {3, 4}) {
      SCOPED_TRACE(std::string(row_test::dtype_name(dtype)) + " x" + std::to_string(channels));
      std::vector<kf_color_conversion_t> conversions;
      if (channels == 3)
        conversions = {KF_COLOR_RGB_TO_BGR, KF_COLOR_RGB_TO_GRAY, KF_COLOR_BGR_TO_GRAY,
                       KF_COLOR_RGB_TO_RGBA, KF_COLOR_BGR_TO_RGBA};
      else
        conversions = {KF_COLOR_RGBA_TO_BGRA, KF_COLOR_RGBA_TO_RGB, KF_COLOR_RGBA_TO_BGR};
      fusion_test::GraphHandle g(ctx());
      Builder b{g};
      const int32_t image = b.image(dtype, channels);
      const int32_t read = b.read(image, KF_IMAGE_READ_DESC_INIT);
      std::vector<int32_t> nodes;
      for (kf_color_conversion_t c : conversions) {
        nodes.push_back(b.color(read, c));
        b.output(nodes.back(), c == KF_COLOR_RGB_TO_BGR ? KF_OUTPUT_PLANAR : KF_OUTPUT_AS_IS);
      }
      // Gray (RGBA to RGB for 4 channels) written as u8 by a saturating, rounding cast.
      const int32_t gray_u8 = b.cast(nodes[1], KF_DTYPE_UINT8, KF_CAST_SATURATE_ROUND);
      b.output(gray_u8);
      fusion_test::KernelHandle k = fusion_test::compile(g);
      ASSERT_NE(k.k, nullptr);

      const std::vector<Num> pixels =
          random_pixels(dtype, static_cast<size_t>(H) * W * channels, rng);
      const DeviceTensor frame = upload_image(pixels, dtype, {H, W, channels}, true);
      std::vector<DeviceTensor> outs;
      std::vector<kf_tensor_t*> handles;
      std::vector<int> out_channels;
      std::vector<kf_dtype_t> out_dtypes;
      for (kf_color_conversion_t c : conversions) {
        const bool gray = c == KF_COLOR_RGB_TO_GRAY || c == KF_COLOR_BGR_TO_GRAY;
        const int oc =
            gray ? 1
            : (c == KF_COLOR_RGBA_TO_RGB || c == KF_COLOR_RGBA_TO_BGR || c == KF_COLOR_RGB_TO_BGR)
                ? 3
                : 4;
        out_channels.push_back(oc);
        out_dtypes.push_back(gray ? KF_DTYPE_FLOAT32 : dtype);
        outs.push_back(output(out_dtypes.back(),
                              c == KF_COLOR_RGB_TO_BGR ? Shape{oc, H, W} : Shape{H, W, oc}));
        handles.push_back(outs.back().handle());
      }
      const int gray_channels = channels == 3 ? 1 : 3;
      outs.push_back(output(KF_DTYPE_UINT8, {H, W, gray_channels}));
      handles.push_back(outs.back().handle());
      const double alpha = 77.0;
      std::vector<kf_fused_value_t> values;
      if (channels == 3) values.push_back({nodes[4], 0, alpha});  // BGR to RGBA: override
      launch_ok(k, 1, {frame.handle()}, handles, {}, values);

      const Img src = to_img(pixels, dtype, H, W, channels);
      const double default_alpha = dtype == KF_DTYPE_UINT8 ? 255.0 : 1.0;
      for (size_t c = 0; c < conversions.size(); ++c) {
        const double a = conversions[c] == KF_COLOR_BGR_TO_RGBA ? alpha : default_alpha;
        const Img want = convert(src, conversions[c], a);
        const std::string what = "conversion " + std::to_string(conversions[c]);
        expect_image(fusion_test::download(outs[c], what), out_dtypes[c], want,
                     conversions[c] == KF_COLOR_RGB_TO_BGR, 1e-6, what);
      }
      const Img rounded = convert(src, conversions[1], 0);
      // Gray in f32 may sit within f32 rounding of a .5 tie: allow one step there only.
      const std::vector<Num> got = fusion_test::download(outs.back(), "u8 cast");
      for (size_t e = 0; e < got.size(); ++e) {
        const double want = std::clamp(std::nearbyint(rounded.v[e]), 0.0, 255.0);
        const bool near_tie = std::fabs(rounded.v[e] - std::floor(rounded.v[e]) - 0.5) < 1e-4;
        EXPECT_LE(std::fabs(static_cast<double>(got[e].i) - want), near_tie ? 1.0 : 0.0)
            << "u8 cast element " << e << " of " << rounded.v[e];
      }
    }
}

// NV12 frames (BT.601 and BT.709, video and full range) through every interpolation, with
// crops hanging over the frame, into RGB f32 of per-item sizes.
TEST_F(ImageTest, Nv12ToRgb) {
  const int H = 24, W = 34, kItems = 2;
  int variant = 0;
  for (kf_color_standard_t standard : {KF_COLOR_BT601, KF_COLOR_BT709})
    for (int full_range = 0; full_range <= 1; ++full_range)
      for (kf_interpolation_t interp : {KF_INTERP_NONE, KF_INTERP_NEAREST, KF_INTERP_BILINEAR}) {
        const kf_border_t border = static_cast<kf_border_t>(variant++ % 3);
        SCOPED_TRACE("standard " + std::to_string(standard) + ", full range " +
                     std::to_string(full_range) + ", interpolation " + std::to_string(interp) +
                     ", border " + std::to_string(border));
        kf_image_read_desc_t desc = crop_read(interp, border);
        desc.border_value = 3.0;
        desc.color_standard = standard;
        desc.full_range = full_range;
        fusion_test::GraphHandle g(ctx());
        Builder b{g};
        const int32_t frame_node = b.nv12();
        b.output(b.read(frame_node, desc));
        fusion_test::KernelHandle k = fusion_test::compile(g, kItems);
        ASSERT_NE(k.k, nullptr);

        std::vector<Num> frame(static_cast<size_t>(H) * 3 / 2 * W);
        for (Num& p : frame) p.i = 1 + static_cast<int64_t>(rng() % 255);
        const DeviceTensor t =
            upload_image(frame, KF_DTYPE_UINT8, {H * 3 / 2, W}, variant % 2 == 0);
        std::vector<DeviceTensor> outs;
        std::vector<kf_tensor_t*> handles;
        std::vector<kf_rect_t> crops;
        std::vector<const kf_tensor_t*> inputs;
        for (int i = 0; i < kItems; ++i) {
          outs.push_back(output(KF_DTYPE_FLOAT32, {4 + static_cast<int64_t>(rng() % 12),
                                                   4 + static_cast<int64_t>(rng() % 12), 3}));
          handles.push_back(outs.back().handle());
          crops.push_back(random_crop(H, W));
          inputs.push_back(t.handle());
        }
        launch_ok(k, kItems, inputs, handles, crops);
        const Img rgb = nv12_to_rgb(frame, H, W, standard, full_range != 0);
        for (int i = 0; i < kItems; ++i) {
          const Img want = read_reference(rgb, crops[i], static_cast<int>(outs[i].shape[1]),
                                          static_cast<int>(outs[i].shape[0]), desc, {3, 3, 3});
          expect_image(fusion_test::download(outs[i], "item"), KF_DTYPE_FLOAT32, want, false, 2e-5,
                       "item " + std::to_string(i));
        }
        if (HasFailure()) return;
      }
}

// 50 crops of one u8 RGB frame in one launch: cast -> multiply -> subtract -> divide, bilinear
// resize of each crop to 24 x 16, written planar into one [50, 3, 16, 24] f32 tensor.
TEST_F(ImageTest, FiftyCropsOfOneFrameInOneLaunch) {
  const int H = 120, W = 160, kItems = 50, out_h = 16, out_w = 24;
  const kf_image_read_desc_t desc = crop_read(KF_INTERP_BILINEAR, KF_BORDER_REPLICATE);
  fusion_test::GraphHandle g(ctx());
  Builder b{g};
  const int32_t image = b.image(KF_DTYPE_UINT8, 3);
  const int32_t read = b.read(image, desc);
  const int32_t scaled = b.binary(KF_BINARY_MUL, read, b.scalar(1.0 / 255));
  const int32_t centred = b.binary(KF_BINARY_SUB, scaled, b.constant({0.485, 0.456, 0.406}));
  const int32_t divided = b.binary(KF_BINARY_DIV, centred, b.constant({0.229, 0.224, 0.225}));
  b.output(divided, KF_OUTPUT_PLANAR, true);
  fusion_test::KernelHandle k = fusion_test::compile(g, 64);
  ASSERT_NE(k.k, nullptr);

  const std::vector<Num> pixels =
      random_pixels(KF_DTYPE_UINT8, static_cast<size_t>(H) * W * 3, rng);
  const DeviceTensor frame = upload_image(pixels, KF_DTYPE_UINT8, {H, W, 3}, false);
  DeviceTensor out = output(KF_DTYPE_FLOAT32, {kItems, 3, out_h, out_w});
  std::vector<kf_rect_t> crops;
  std::vector<const kf_tensor_t*> inputs(kItems, frame.handle());
  std::vector<kf_tensor_t*> outputs(kItems, out.handle());
  for (int i = 0; i < kItems; ++i) crops.push_back(random_crop(H, W));
  launch_ok(k, kItems, inputs, outputs, crops);

  const Img src = to_img(pixels, KF_DTYPE_UINT8, H, W, 3);
  const std::vector<Num> all = fusion_test::download(out, "batched output");
  const size_t per_item = static_cast<size_t>(3) * out_h * out_w;
  for (int i = 0; i < kItems; ++i) {
    Img want = read_reference(src, crops[i], out_w, out_h, desc, {0, 0, 0});
    want = normalize(want, 1.0 / 255, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
    const std::vector<Num> item = item_values(all, i, per_item);
    expect_image(item, KF_DTYPE_FLOAT32, want, true, 2e-5, "crop " + std::to_string(i));
  }
}

// Two images of different sizes read without crops (each read resamples its own whole image to
// the output size), a 1-channel mask broadcast over 3 channels, a per-channel constant, and
// per-item outputs of different sizes in one launch.
TEST_F(ImageTest, TwoImagesOfDifferentSizesAndChannelBroadcast) {
  const int H1 = 17, W1 = 23, H2 = 6, W2 = 9, kItems = 2;
  fusion_test::GraphHandle g(ctx());
  Builder b{g};
  const int32_t frame = b.image(KF_DTYPE_UINT8, 3);
  const int32_t mask = b.image(KF_DTYPE_FLOAT32, 1);
  kf_image_read_desc_t bilinear = KF_IMAGE_READ_DESC_INIT;
  bilinear.interpolation = KF_INTERP_BILINEAR;
  bilinear.border = KF_BORDER_REFLECT;
  kf_image_read_desc_t nearest = KF_IMAGE_READ_DESC_INIT;
  nearest.interpolation = KF_INTERP_NEAREST;
  const int32_t pixels = b.read(frame, bilinear);
  const int32_t weights = b.read(mask, nearest);
  const int32_t masked = b.binary(KF_BINARY_MUL, pixels, weights);  // 3 x 1 channels
  const int32_t shifted = b.binary(KF_BINARY_ADD, masked, b.constant({1.0, -2.0, 3.5}));
  b.output(shifted, KF_OUTPUT_PLANAR);
  // where / clamp with 1-channel conditions and per-channel constants (channel broadcasts).
  const int32_t bright = b.binary(KF_BINARY_GT, weights, b.scalar(128.0));  // u8, 1 channel
  const int32_t chosen = b.where(bright, shifted, b.constant({9.0, 8.0, 7.0}));
  b.output(b.clamp(chosen, b.constant({10.0, 20.0, 30.0}), b.scalar(200.0)));
  fusion_test::KernelHandle k = fusion_test::compile(g, kItems);
  ASSERT_NE(k.k, nullptr);

  std::vector<const kf_tensor_t*> inputs;
  std::vector<kf_tensor_t*> outputs;
  std::vector<DeviceTensor> frames, masks, outs;
  std::vector<std::vector<Num>> frame_pixels, mask_pixels;
  for (int i = 0; i < kItems; ++i) {
    frame_pixels.push_back(random_pixels(KF_DTYPE_UINT8, size_t{H1} * W1 * 3, rng));
    mask_pixels.push_back(random_pixels(KF_DTYPE_FLOAT32, size_t{H2} * W2, rng));
    frames.push_back(upload_image(frame_pixels.back(), KF_DTYPE_UINT8, {H1, W1, 3}, i == 1));
    masks.push_back(upload_image(mask_pixels.back(), KF_DTYPE_FLOAT32, {H2, W2, 1}, i == 0));
    outs.push_back(output(KF_DTYPE_FLOAT32, {3, 7 + 5 * i, 11 + 3 * i}));
    outs.push_back(output(KF_DTYPE_FLOAT32, {7 + 5 * i, 11 + 3 * i, 3}));
    inputs.push_back(frames.back().handle());
    inputs.push_back(masks.back().handle());
    outputs.push_back(outs[outs.size() - 2].handle());
    outputs.push_back(outs.back().handle());
  }
  launch_ok(k, kItems, inputs, outputs, {});
  for (int i = 0; i < kItems; ++i) {
    const DeviceTensor& planar = outs[2 * i];
    const DeviceTensor& clamped = outs[2 * i + 1];
    const int out_h = static_cast<int>(planar.shape[1]), out_w = static_cast<int>(planar.shape[2]);
    const Img a = read_reference(to_img(frame_pixels[i], KF_DTYPE_UINT8, H1, W1, 3), {0, 0, W1, H1},
                                 out_w, out_h, bilinear, {0, 0, 0});
    const Img m = read_reference(to_img(mask_pixels[i], KF_DTYPE_FLOAT32, H2, W2, 1),
                                 {0, 0, W2, H2}, out_w, out_h, nearest, {0});
    Img want = a;
    const double constant[3] = {1.0, -2.0, 3.5};
    for (int y = 0; y < out_h; ++y)
      for (int x = 0; x < out_w; ++x)
        for (int ch = 0; ch < 3; ++ch)
          want.at(x, y, ch) = a.at(x, y, ch) * m.at(x, y, 0) + constant[ch];
    expect_image(fusion_test::download(planar, "item"), KF_DTYPE_FLOAT32, want, true, 2e-5,
                 "item " + std::to_string(i));
    const double otherwise[3] = {9.0, 8.0, 7.0}, lo[3] = {10.0, 20.0, 30.0};
    for (int y = 0; y < out_h; ++y)
      for (int x = 0; x < out_w; ++x)
        for (int ch = 0; ch < 3; ++ch) {
          const double v = m.at(x, y, 0) > 128.0 ? want.at(x, y, ch) : otherwise[ch];
          want.at(x, y, ch) = std::min(std::max(v, lo[ch]), 200.0);
        }
    expect_image(fusion_test::download(clamped, "item"), KF_DTYPE_FLOAT32, want, false, 2e-5,
                 "item " + std::to_string(i) + " (where, clamp)");
  }
}

// Hundreds of crops of one frame in one launch (a uniform batch: one frame, batched outputs),
// bilinear with replicate or constant borders and letterbox, normalised and written planar, and
// the read itself as-is; then the same items alternating between two frames (every item encoded
// in a table). Checked against the reference on a sample of items, and, on CUDA, against the
// CPU executor on the same data bit for bit (the f32 normalisation included: the device's fast
// division path must give the correctly rounded quotient).
TEST_F(ImageTest, HundredsOfCropsMatchTheReferenceAndTheCpu) {
  const int H = 53, W = 71, kItems = 300, kCapacity = 1000, out_h = 9, out_w = 13;
  const std::vector<double> mean = {0.485, 0.456, 0.406}, stdev = {0.229, 0.224, 0.225};
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    kf_image_read_desc_t desc =
        crop_read(KF_INTERP_BILINEAR, variant == 0 ? KF_BORDER_REPLICATE : KF_BORDER_CONSTANT);
    desc.keep_aspect_ratio = variant;
    desc.border_value = 17.0;
    // The same graph in this test's context and on the CPU.
    auto build = [&](fusion_test::GraphHandle& graph) {
      Builder b{graph};
      const int32_t read = b.read(b.image(KF_DTYPE_UINT8, 3), desc);
      b.output(b.normalize(read, 1.0 / 255, mean, stdev), KF_OUTPUT_PLANAR, true);
      b.output(read, KF_OUTPUT_AS_IS, true);
    };
    fusion_test::GraphHandle g(ctx());
    build(g);
    fusion_test::KernelHandle k = fusion_test::compile(g, kCapacity);
    ASSERT_NE(k.k, nullptr);
    fusion_test::ContextHandle cpu(KF_DEVICE_CPU);
    fusion_test::GraphHandle cpu_graph(cpu);
    build(cpu_graph);
    fusion_test::KernelHandle cpu_kernel = fusion_test::compile(cpu_graph, kCapacity);
    ASSERT_NE(cpu_kernel.k, nullptr);

    std::vector<std::vector<Num>> pixels;
    std::vector<DeviceTensor> frames, cpu_frames;
    for (int f = 0; f < 2; ++f) {
      pixels.push_back(random_pixels(KF_DTYPE_UINT8, static_cast<size_t>(H) * W * 3, rng));
      frames.push_back(upload_image(pixels.back(), KF_DTYPE_UINT8, {H, W, 3}, f == 1));
      cpu_frames.push_back(fusion_test::make_tensor(cpu, KF_DTYPE_UINT8, {H, W, 3}, false, rng));
      fusion_test::upload(cpu_frames.back(), pixels.back());
    }
    std::vector<kf_rect_t> crops;
    for (int i = 0; i < kItems; ++i) crops.push_back(random_crop(H, W));

    for (const bool uniform : {true, false}) {
      SCOPED_TRACE(uniform ? "one frame" : "two frames");
      auto run = [&](kf_fused_kernel_t* kernel, const std::vector<DeviceTensor>& images,
                     DeviceTensor* planar, DeviceTensor* raw) {
        fusion_test::poison(*planar);
        fusion_test::poison(*raw);
        std::vector<const kf_tensor_t*> inputs;
        std::vector<kf_tensor_t*> outputs;
        for (int i = 0; i < kItems; ++i) {
          inputs.push_back(images[uniform ? 0 : i % 2].handle());
          outputs.push_back(planar->handle());
          outputs.push_back(raw->handle());
        }
        KF_ASSERT_OK(fusion_test::launch(kernel, kItems, inputs, outputs, crops));
      };
      const Shape planar_shape = {kItems, 3, out_h, out_w}, raw_shape = {kItems, out_h, out_w, 3};
      DeviceTensor planar =
          fusion_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, planar_shape, false, rng);
      DeviceTensor raw = fusion_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, raw_shape, false, rng);
      DeviceTensor cpu_planar =
          fusion_test::make_tensor(cpu, KF_DTYPE_FLOAT32, planar_shape, false, rng);
      DeviceTensor cpu_raw = fusion_test::make_tensor(cpu, KF_DTYPE_FLOAT32, raw_shape, false, rng);
      run(k, frames, &planar, &raw);
      run(cpu_kernel, cpu_frames, &cpu_planar, &cpu_raw);
      const std::vector<Num> got_planar = fusion_test::download(planar, "planar");
      const std::vector<Num> got_raw = fusion_test::download(raw, "raw");
      const std::vector<Num> want_planar = fusion_test::download(cpu_planar, "cpu planar");
      const std::vector<Num> want_raw = fusion_test::download(cpu_raw, "cpu raw");
      ASSERT_EQ(got_planar.size(), want_planar.size());
      size_t bad = 0;
      for (size_t e = 0; e < got_planar.size(); ++e) {
        if ((got_planar[e].f != want_planar[e].f || got_raw[e].f != want_raw[e].f) && bad++ < 5)
          ADD_FAILURE() << "element " << e << ": planar " << got_planar[e].f << " vs CPU "
                        << want_planar[e].f << ", read " << got_raw[e].f << " vs CPU "
                        << want_raw[e].f;
      }
      EXPECT_EQ(bad, 0u);
      // The reference, on every item where the comparison above is of the CPU executor with
      // itself, else on every 7th.
      const size_t per_item = static_cast<size_t>(3) * out_h * out_w;
      const std::vector<double> border(3, 17.0);
      const int item_step = kf_test::device_under_test() == KF_DEVICE_CPU ? 1 : 7;
      for (int i = 0; i < kItems; i += item_step) {
        const Img src = to_img(pixels[uniform ? 0 : i % 2], KF_DTYPE_UINT8, H, W, 3);
        const Img read = read_reference(src, crops[i], out_w, out_h, desc, border);
        const std::string what = "item " + std::to_string(i);
        expect_image(item_values(got_raw, i, per_item), KF_DTYPE_FLOAT32, read, false, 2e-6,
                     what + " (read)");
        expect_image(item_values(got_planar, i, per_item), KF_DTYPE_FLOAT32,
                     normalize(read, 1.0 / 255, mean, stdev), true, 2e-5, what + " (normalised)");
      }
      if (HasFailure()) return;
    }
  }
}

#if defined(KF_TEST_CUDA)
// A launch whose item table does not fit the kernel parameter (300 items of two frames in a
// kernel of capacity 1000), captured into a CUDA graph (global capture mode, the strictest) after
// a warm-up launch, then replayed twice with eager launches of other crops between: each replay
// must write the captured crops, and each eager launch its own. The table must belong to the
// graph, not to a staging buffer that later launches reuse.
TEST_F(ImageTest, CapturedTableLaunchKeepsItsItems) {
  const int H = 41, W = 57, kItems = 300, kCapacity = 1000, out_h = 7, out_w = 11;
  const kf_image_read_desc_t desc = crop_read(KF_INTERP_BILINEAR, KF_BORDER_REPLICATE);
  fusion_test::GraphHandle g(ctx());
  Builder b{g};
  b.output(b.read(b.image(KF_DTYPE_UINT8, 3), desc), KF_OUTPUT_AS_IS, true);
  fusion_test::KernelHandle k = fusion_test::compile(g, kCapacity);
  ASSERT_NE(k.k, nullptr);

  std::vector<std::vector<Num>> pixels;
  std::vector<DeviceTensor> frames;
  for (int f = 0; f < 2; ++f) {
    pixels.push_back(random_pixels(KF_DTYPE_UINT8, static_cast<size_t>(H) * W * 3, rng));
    frames.push_back(upload_image(pixels.back(), KF_DTYPE_UINT8, {H, W, 3}, f == 1));
  }
  std::vector<kf_rect_t> captured_crops, eager_crops;
  for (int i = 0; i < kItems; ++i) captured_crops.push_back(random_crop(H, W));
  for (int i = 0; i < kItems; ++i) eager_crops.push_back(random_crop(H, W));
  const Shape shape = {kItems, out_h, out_w, 3};
  DeviceTensor graph_out = output(KF_DTYPE_FLOAT32, shape);
  DeviceTensor eager_out = output(KF_DTYPE_FLOAT32, shape);

  kf_stream_t* stream = nullptr;
  KF_ASSERT_OK(kf_stream_create(ctx(), nullptr, &stream));
  void* native = nullptr;
  KF_ASSERT_OK(kf_stream_get_native(stream, &native));
  const auto cs = static_cast<cudaStream_t>(native);
  auto launch = [&](DeviceTensor& out, const std::vector<kf_rect_t>& crops) {
    std::vector<const kf_tensor_t*> inputs;
    std::vector<kf_tensor_t*> outputs;
    for (int i = 0; i < kItems; ++i) {
      inputs.push_back(frames[i % 2].handle());
      outputs.push_back(out.handle());
    }
    return fusion_test::launch(k, kItems, inputs, outputs, crops, {}, stream);
  };
  auto expect_crops = [&](const DeviceTensor& out, const std::vector<kf_rect_t>& crops,
                          const std::string& what) {
    const std::vector<Num> all = fusion_test::download(out, what);
    const size_t per_item = static_cast<size_t>(out_h) * out_w * 3;
    for (int i = 0; i < kItems && !HasFailure(); i += 3) {
      const Img want = read_reference(to_img(pixels[i % 2], KF_DTYPE_UINT8, H, W, 3), crops[i],
                                      out_w, out_h, desc, {0, 0, 0});
      const std::vector<Num> item = item_values(all, i, per_item);
      expect_image(item, KF_DTYPE_FLOAT32, want, false, 2e-6, what + ", item " + std::to_string(i));
    }
  };
  // The warm-up: the program, its occupancy and every tensor's allocation settled.
  KF_ASSERT_OK(launch(eager_out, eager_crops));
  KF_ASSERT_OK(kf_stream_synchronize(stream));

  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal), cudaSuccess);
  const kf_result_t captured = launch(graph_out, captured_crops);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
  KF_ASSERT_OK(captured);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    fusion_test::poison(graph_out);
    fusion_test::poison(eager_out);
    KF_ASSERT_OK(launch(eager_out, eager_crops));  // eager launches of other crops, before...
    ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
    for (kf_rect_t& r : eager_crops) std::swap(r.x, r.y);
    KF_ASSERT_OK(launch(eager_out, eager_crops));  // ... and after the replay
    KF_ASSERT_OK(kf_stream_synchronize(stream));
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    expect_crops(graph_out, captured_crops, "replayed");
    expect_crops(eager_out, eager_crops, "eager");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  KF_ASSERT_OK(kf_stream_destroy(stream));
}
#endif

}  // namespace
