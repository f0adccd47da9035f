// Code generation for image graphs (codegen.hpp): blockIdx.z is the item, a 2-D grid-stride
// loop over the item's output pixels, columns outer (each read's column sample is computed once
// per column) and rows inner (the row sample once per row); each pixel evaluates every node for
// all its channels and writes (y, x, c) of each output.
#include <string>
#include <vector>

#include "core/fusion/codegen.hpp"

namespace kf {
namespace fusion {
namespace codegen {
namespace {

const char* interp_name(kf_interpolation_t i) {
  static const char* const names[] = {"none", "nearest", "bilinear"};
  return names[static_cast<int>(i)];
}

const char* border_name(kf_border_t b) {
  static const char* const names[] = {"constant", "replicate", "reflect"};
  return names[static_cast<int>(b)];
}

}  // namespace

void Generator::read(int32_t id) {
  const Node& n = g_.nodes[id];
  const Node& image = g_.nodes[n.args[0]];
  const int pos = image.input.position;
  const ReadInfo& r = n.read;
  w_.line("km::Compute<%s> %s[%d];", dtype_name(n.dtype), var(id).c_str(), n.channels);
  const bool nv12 = image.input.kind == KF_INPUT_NV12;
  const int border_channels = nv12 ? 3 : image.channels;
  const std::string type = nv12 ? std::string("float")
                                : format("km::ReadCompute<%s, km::interp::%s>",
                                         dtype_name(image.dtype), interp_name(r.interpolation));
  std::vector<std::string> inits;
  for (int c = 0; c < border_channels; ++c) {
    inits.push_back(nv12 ? format("static_cast<float>(p.values[%d])", n.value_offset + c)
                         : format("km::from_value<km::ReadDtype<%s, km::interp::%s>::value>("
                                  "p.values[%d])",
                                  dtype_name(image.dtype), interp_name(r.interpolation),
                                  n.value_offset + c));
  }
  const std::string border = konst(format("b%d", id), type, inits, true);
  if (nv12) {
    w_.line(
        "km::read_nv12_at<km::interp::%s, km::border::%s, %s, km::color_standard::%s, %s>("
        "image%d, sx%d, sy%d, %s, %s);",
        interp_name(r.interpolation), border_name(r.border), keep(r) ? "true" : "false",
        r.color_standard == KF_COLOR_BT709 ? "bt709" : "bt601", r.full_range ? "true" : "false",
        pos, id, id, border.c_str(), var(id).c_str());
  } else {
    w_.line(
        "km::read_image_at<%s, %d, km::interp::%s, km::border::%s, %s>(image%d, sx%d, sy%d, "
        "%s, %s);",
        dtype_name(image.dtype), image.channels, interp_name(r.interpolation),
        border_name(r.border), keep(r) ? "true" : "false", pos, id, id, border.c_str(),
        var(id).c_str());
  }
}

// Keep-aspect matters only with a resize (image.hpp ignores it otherwise).
bool Generator::keep(const ReadInfo& r) {
  return r.keep_aspect_ratio && r.interpolation != KF_INTERP_NONE;
}

// The axis sample of each live read along x (column, at `at`) or y (row): `prefix` + id names
// it.
void Generator::axis_samples(bool x, const char* prefix, const char* at) {
  for (size_t id = 0; id < g_.nodes.size(); ++id) {
    const Node& n = g_.nodes[id];
    if (!live_[id] || n.kind != NodeKind::read_image) continue;
    const int k = g_.nodes[n.args[0]].input.position;
    w_.line(
        "const km::AxisSample %s%zu = km::axis_sample_%c<km::interp::%s, km::border::%s, "
        "%s>(geometry%zu, %s, image%d.%s);",
        prefix, id, x ? 'x' : 'y', interp_name(n.read.interpolation), border_name(n.read.border),
        keep(n.read) ? "true" : "false", id, at, k, x ? "width" : "height");
  }
}

// Every live node of the pixel and the stores of its outputs (fast: fast paths, then stores
// only if their check passed).
void Generator::pixel(bool fast) {
  fast_ = fast ? "true" : "false";
  for (size_t id = 0; id < g_.nodes.size(); ++id) {
    if (live_[id]) node(static_cast<int32_t>(id));
  }
  fast_ = "false";
  if (fast) w_.open("if (ok.passed())");
  for (size_t o = 0; o < g_.outputs.size(); ++o) {
    const Node& n = g_.nodes[g_.outputs[o].node];
    const char* d = dtype_name(n.dtype);
    for (int c = 0; c < n.channels; ++c) {
      w_.line("km::store<%s>(out%zu, column%zu + row%zu + %d * out%zu_c, %s);", d, o, o, o, c, o,
              target(g_.outputs[o].node, c).c_str());
    }
  }
  if (fast) w_.close();
}

void Generator::image_kernel() {
  w_.line("}  // namespace");
  w_.blank();
  w_.open(
      format("extern \"C\" __global__ void __launch_bounds__(%d) kf_fused_kernel(const "
             "__grid_constant__ Params p)",
             kBlockThreads));
  dependent_launch_prologue();
  w_.line("const Consts k = make_consts(p);");
  w_.open("for (long long item = blockIdx.z; item < p.n_items; item += gridDim.z)");
  if (layout_.compact) {
    w_.line("const bool uniform = p.items == nullptr;");
    w_.line("const Item& it = uniform ? p.common : p.items[item];");
    w_.line("const int* const crop = uniform ? p.crops[item] : nullptr;");
  } else {
    w_.line("const Item& it = %s[item];", layout_.inline_items ? "p.inline_items" : "p.items");
  }
  w_.line("const int out_h = static_cast<int>(it.out_h), out_w = static_cast<int>(it.out_w);");
  std::vector<bool> input_read(g_.inputs.size(), false);
  for (size_t id = 0; id < g_.nodes.size(); ++id) {
    if (live_[id] && g_.nodes[id].kind == NodeKind::read_image) {
      input_read[g_.nodes[g_.nodes[id].args[0]].input.position] = true;
    }
  }
  for (int32_t input_id : g_.inputs) {
    const Node& in = g_.nodes[input_id];
    const int k = in.input.position;
    if (!input_read[k]) continue;
    if (in.input.kind == KF_INPUT_NV12) {
      // [H * 3 / 2, W]: the frame is H rows of luma.
      w_.line(
          "const km::ImageView image%d = {it.in_data[%d], static_cast<int>(it.in_shape[%d][0] "
          "* 2 / 3), static_cast<int>(it.in_shape[%d][1]), it.in_strides[%d][0], "
          "it.in_strides[%d][1], 0};",
          k, k, k, k, k, k);
    } else {
      w_.line(
          "const km::ImageView image%d = {it.in_data[%d], static_cast<int>(it.in_shape[%d][0]), "
          "static_cast<int>(it.in_shape[%d][1]), it.in_strides[%d][0], it.in_strides[%d][1], "
          "it.in_strides[%d][2]};",
          k, k, k, k, k, k, k);
    }
  }
  bool any_crop = false;
  for (size_t id = 0; id < g_.nodes.size(); ++id)
    any_crop = any_crop ||
               (live_[id] && g_.nodes[id].kind == NodeKind::read_image && g_.nodes[id].read.crop);
  if (any_crop) {
    if (layout_.compact) {
      w_.line("const int crop_x = crop ? crop[0] : static_cast<int>(it.crop_x);");
      w_.line("const int crop_y = crop ? crop[1] : static_cast<int>(it.crop_y);");
      w_.line("const int crop_w = crop ? crop[2] : static_cast<int>(it.crop_w);");
      w_.line("const int crop_h = crop ? crop[3] : static_cast<int>(it.crop_h);");
    } else {
      w_.line(
          "const int crop_x = static_cast<int>(it.crop_x), crop_y = "
          "static_cast<int>(it.crop_y), crop_w = static_cast<int>(it.crop_w), crop_h = "
          "static_cast<int>(it.crop_h);");
    }
  }
  for (size_t id = 0; id < g_.nodes.size(); ++id) {
    const Node& n = g_.nodes[id];
    if (!live_[id] || n.kind != NodeKind::read_image) continue;
    const int k = g_.nodes[n.args[0]].input.position;
    if (n.read.crop) {
      w_.line(
          "const km::ReadGeometry geometry%zu = km::make_read_geometry(crop_x, crop_y, crop_w, "
          "crop_h, out_w, out_h, %s);",
          id, n.read.keep_aspect_ratio ? "true" : "false");
    } else {
      w_.line(
          "const km::ReadGeometry geometry%zu = km::make_read_geometry(0, 0, image%d.width, "
          "image%d.height, out_w, out_h, %s);",
          id, k, k, n.read.keep_aspect_ratio ? "true" : "false");
    }
  }
  for (size_t o = 0; o < g_.outputs.size(); ++o) {
    if (layout_.compact) {
      w_.line("char* const out%zu = it.out_data[%zu] + (uniform ? item * p.out_step[%zu] : 0);", o,
              o, o);
    } else {
      w_.line("char* const out%zu = it.out_data[%zu];", o, o);
    }
    w_.line(
        "const long long out%zu_y = it.out_strides[%zu][0], out%zu_x = it.out_strides[%zu][1], "
        "out%zu_c = it.out_strides[%zu][2];",
        o, o, o, o, o, o);
  }
  // Columns outer, a warp's 32 lanes on 32 neighbouring columns (blockDim.x is 32), warp-uniform
  // loops: a lane's column (and its samples) stays while the warp walks rows. Each lane
  // computes the row samples of one of the warp's next 32 rows; the warp takes them in turn
  // by shuffles (a row's sample is the same for every lane).
  w_.open(
      "for (int x_first = blockIdx.x * blockDim.x; x_first < out_w; x_first += gridDim.x * "
      "blockDim.x)");
  w_.line("const int x = x_first + static_cast<int>(threadIdx.x);");
  w_.line("const bool in_row = x < out_w;");
  axis_samples(true, "sx", "in_row ? x : out_w - 1");
  for (size_t o = 0; o < g_.outputs.size(); ++o)
    w_.line("const long long column%zu = x * out%zu_x;", o, o);
  w_.line("const long long y_step = static_cast<long long>(gridDim.y) * blockDim.y;");
  w_.open(
      "for (long long y_first = blockIdx.y * blockDim.y + threadIdx.y; y_first < out_h; "
      "y_first += 32 * y_step)");
  w_.line("const long long lane_row = y_first + threadIdx.x * y_step;");
  axis_samples(false, "lane_sy", "static_cast<int>(lane_row < out_h ? lane_row : out_h - 1)");
  w_.line(
      "const int rows = static_cast<int>((out_h - y_first + y_step - 1) / y_step < 32 ? "
      "(out_h - y_first + y_step - 1) / y_step : 32);");
  w_.open("for (int j = 0; j < rows; ++j)");
  w_.line("const int y = static_cast<int>(y_first + j * y_step);");
  for (size_t id = 0; id < g_.nodes.size(); ++id) {
    const Node& n = g_.nodes[id];
    if (!live_[id] || n.kind != NodeKind::read_image) continue;
    w_.line("const km::AxisSample sy%zu = km::shuffle_sample<km::interp::%s>(lane_sy%zu, j);", id,
            interp_name(n.read.interpolation), id);
  }
  w_.line("if (!in_row) continue;");
  for (size_t o = 0; o < g_.outputs.size(); ++o)
    w_.line("const long long row%zu = y * out%zu_y;", o, o);
  if (has_fast_) {
    w_.line("km::FastCheck ok;");
    w_.open("");
    pixel(true);
    w_.close();
    w_.open("if (!ok.passed())");
    pixel(false);
    w_.close();
  } else {
    w_.line("km::FastCheck ok;  // unused: no fast path");
    pixel(false);
  }
  w_.close();
  w_.close();
  w_.close();
  w_.close();
  w_.close();
}

}  // namespace codegen
}  // namespace fusion
}  // namespace kf
