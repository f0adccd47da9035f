// The image nodes of the CPU executor: reads (HWC and NV12), colour conversions and
// normalisation over a tile of output pixels, through core/math/image.hpp (the functions the
// generated CUDA code calls). Every structural choice (dtype, channels, interpolation, border,
// letterbox, colour standard and range, conversion) is dispatched once per tile into a templated
// loop over the tile's pixels.
#include <cstdint>

#include "core/fusion/cpu/tile.hpp"

namespace kf {
namespace fusion {
namespace cpu {
namespace {

template <class Fn>
void with_channels(int32_t channels, Fn&& fn) {
  switch (channels) {
    case 1: fn(Int<1>{}); break;
    case 3: fn(Int<3>{}); break;
    default: fn(Int<4>{}); break;
  }
}

template <class Fn>
void with_bool(bool value, Fn&& fn) {
  if (value)
    fn(std::true_type{});
  else
    fn(std::false_type{});
}

// Calls read(x, y, out) for every pixel of the tile; out advances by `channels` values.
template <class T, class Read>
void for_each_pixel(const PixelTile& tile, int channels, T* out, Read&& read) {
  int64_t y = tile.begin / tile.width;
  int64_t x = tile.begin % tile.width;
  for (int64_t i = 0; i < tile.count; ++i) {
    read(static_cast<int>(x), static_cast<int>(y), out + i * channels);
    if (++x == tile.width) {
      x = 0;
      ++y;
    }
  }
}

}  // namespace

void read_tile(const Graph& g, const Node& node, const PixelTile& tile, const double* values,
               void* out) {
  const Node& input = g.nodes[static_cast<size_t>(node.args[0])];
  const Binding& b = tile.item->inputs[static_cast<size_t>(input.input.position)];
  const bool nv12 = input.input.kind == KF_INPUT_NV12;
  math::ImageView image;
  image.data = b.data;
  image.height = static_cast<int>(nv12 ? b.shape[0] / 3 * 2 : b.shape[0]);
  image.width = static_cast<int>(b.shape[1]);
  image.row_stride = b.strides[0];
  image.col_stride = b.strides[1];
  image.channel_stride = nv12 ? 0 : b.strides[2];
  // A cropping read samples the item's rectangle; any other read its own whole image.
  const kf_rect_t crop =
      node.read.crop ? tile.item->crop : kf_rect_t{0, 0, image.width, image.height};
  const ReadInfo& r = node.read;
  const math::ReadGeometry geometry = math::make_read_geometry(
      crop.x, crop.y, crop.width, crop.height, tile.width, tile.height, r.keep_aspect_ratio);
  const double* border_values = values + node.value_offset;

  with_int<KF_INTERP_NONE, KF_INTERP_BILINEAR>(r.interpolation, [&](auto interp) {
    with_int<KF_BORDER_CONSTANT, KF_BORDER_REFLECT>(r.border, [&](auto border) {
      with_bool(r.keep_aspect_ratio && interp() != math::interp::none, [&](auto keep) {
        if (nv12) {
          with_bool(r.color_standard == KF_COLOR_BT709, [&](auto bt709) {
            with_bool(r.full_range, [&](auto full_range) {
              constexpr int standard = bt709() ? math::color_standard::bt709 : 0;
              for_each_pixel(tile, 3, static_cast<float*>(out), [&](int x, int y, float* v) {
                math::read_nv12<interp(), border(), keep(), standard, full_range()>(
                    image, geometry, x, y, border_values, v);
              });
            });
          });
          return;
        }
        with_dtype(input.dtype, [&](auto dtype) {
          with_channels(node.channels, [&](auto channels) {
            using T = math::ReadCompute<dtype(), interp()>;
            for_each_pixel(tile, channels(), static_cast<T*>(out), [&](int x, int y, T* v) {
              math::read_image<dtype(), channels(), interp(), border(), keep()>(
                  image, geometry, x, y, border_values, v);
            });
          });
        });
      });
    });
  });
}

void color_tile(const Graph& g, const Node& node, const void* in, int64_t count,
                const double* values, void* out) {
  const Node& arg = g.nodes[static_cast<size_t>(node.args[0])];
  const double alpha = node.value_count > 0 ? values[node.value_offset] : 0.0;
  with_dtype(arg.dtype, [&](auto dtype) {
    auto run = [&](auto conversion) {
      constexpr int C = conversion();
      using Shape = math::ColorShape<C>;
      using In = math::Compute<dtype()>;
      using Out = math::Compute<math::ColorDtype<C, dtype()>::value>;
      const In* src = static_cast<const In*>(in);
      Out* dst = static_cast<Out*>(out);
      for (int64_t i = 0; i < count; ++i)
        math::color_convert<C, dtype()>(src + i * Shape::in, alpha, dst + i * Shape::out);
    };
    with_int<0, KF_COLOR_BGR_TO_RGBA>(node.op, run);
  });
}

void normalize_tile(const Graph& g, const Node& node, const void* in, int64_t count,
                    const double* values, void* out) {
  const Node& arg = g.nodes[static_cast<size_t>(node.args[0])];
  const int channels = node.channels;
  const double scale = values[node.value_offset];
  const double* mean = values + node.value_offset + 1;
  const double* std = mean + channels;
  with_dtype(arg.dtype, [&](auto dtype) {
    using In = math::Compute<dtype()>;
    using Out = math::NormalizeCompute<dtype()>;
    const In* src = static_cast<const In*>(in);
    Out* dst = static_cast<Out*>(out);
    for (int64_t i = 0; i < count; ++i)
      for (int c = 0; c < channels; ++c)
        dst[i * channels + c] =
            math::normalize<dtype()>(src[i * channels + c], scale, mean[c], std[c]);
  });
}

}  // namespace cpu
}  // namespace fusion
}  // namespace kf
