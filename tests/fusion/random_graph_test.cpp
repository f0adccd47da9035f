// Property-based tests of tensor graphs: random chains and DAGs of random elementwise ops and
// dtypes over random broadcast shapes and strided views, checked against a reference written
// here in float64 (integers exact in int64). The reference follows graph.h's semantics: floating
// values of f32/f16/bf16 nodes are held in float (rounded after every node), f64 in double,
// integers wrapped after every node. It also carries, per value, a first-order bound of how far
// a correct engine may be from it (only exp, log, pow and the activations are not correctly
// rounded, and their few-ulp differences propagate); integer results derived from a float that
// lies within that bound of a rounding or comparison boundary are "unsure" and not compared.
// Every other integer result must match exactly, on the CPU and on CUDA.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/fusion/fusion_test_util.hpp"

namespace {

using fusion_test::Builder;
using fusion_test::DeviceTensor;
using fusion_test::is_integer;
using fusion_test::Num;
using fusion_test::Shape;

// IEEE 754-2019 minimum and maximum, the fusion engine's float min and max: NaN if either
// operand is NaN, -0 below +0.
double ieee_minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
double ieee_maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return std::signbit(a) ? b : a;
  return a < b ? b : a;
}

enum class Kind { input, scalar, unary, activation, binary, clamp, where, cast };

struct RefNode {
  Kind kind = Kind::input;
  int op = 0;
  int args[3] = {-1, -1, -1};
  kf_dtype_t dtype = KF_DTYPE_FLOAT32;  // scalars: the dtype of the operand they meet
  double value = 0.0;                   // scalars: the default value
  int32_t rank = 0;                     // inputs
  int32_t id = -1;                      // graph node id (set when built)
};

// A random graph: nodes in topological order, which inputs and outputs.
struct Case {
  uint64_t seed = 0;
  std::vector<RefNode> nodes;
  std::vector<int> inputs, outputs;
};

// A value of the reference and how far the engine may be from it.
struct Ref {
  double f = 0.0;
  int64_t i = 0;
  double err = 0.0;     // floating values: absolute bound
  bool unsure = false;  // not comparable (see the file comment)
};

constexpr kf_dtype_t kAllDtypes[] = {KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT16, KF_DTYPE_BFLOAT16,
                                     KF_DTYPE_FLOAT64, KF_DTYPE_INT8,    KF_DTYPE_UINT8,
                                     KF_DTYPE_INT32,   KF_DTYPE_INT64};

double unit_roundoff(kf_dtype_t d) {
  return d == KF_DTYPE_FLOAT64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
}
double tiny(kf_dtype_t d) {
  return d == KF_DTYPE_FLOAT64 ? std::numeric_limits<double>::denorm_min() * 4
                               : std::numeric_limits<float>::denorm_min() * 4;
}
double max_finite(kf_dtype_t d) {
  switch (d) {
    case KF_DTYPE_FLOAT16: return 65504.0;
    case KF_DTYPE_BFLOAT16: return 3.3895313892515355e38;
    case KF_DTYPE_FLOAT32: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}
// Relative spacing of a floating storage dtype.
double storage_ulp(kf_dtype_t d) {
  switch (d) {
    case KF_DTYPE_FLOAT16: return std::ldexp(1.0, -10);
    case KF_DTYPE_BFLOAT16: return std::ldexp(1.0, -7);
    case KF_DTYPE_FLOAT32: return std::ldexp(1.0, -23);
    default: return std::ldexp(1.0, -52);
  }
}

// ---------------------------------------------------------------------------------------------
// Generation.

struct Generator {
  std::mt19937_64 rng;
  Case c;

  explicit Generator(uint64_t seed) : rng(seed) { c.seed = seed; }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
  double uniform_real(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  }
  bool chance(double p) { return uniform_real(0.0, 1.0) < p; }
  kf_dtype_t random_dtype() {
    // Floating dtypes twice as often: most graphs compute in floating point.
    const int k = uniform(0, 11);
    return k < 8 ? kAllDtypes[k] : kAllDtypes[k - 8];
  }
  int add(RefNode n) {
    c.nodes.push_back(n);
    return static_cast<int>(c.nodes.size()) - 1;
  }
  // A nonzero scalar for an operand of dtype d.
  int scalar(kf_dtype_t d) {
    RefNode n;
    n.kind = Kind::scalar;
    n.dtype = d;
    if (is_integer(d)) {
      int v = uniform(1, 9) * (chance(0.3) ? -1 : 1);
      if (d == KF_DTYPE_UINT8) v = std::abs(v);
      n.value = chance(0.2) ? v + 0.5 : v;  // a fraction is truncated toward zero
    } else {
      n.value = (chance(0.5) ? -1 : 1) * uniform_real(0.25, 3.0);
    }
    return add(n);
  }
  int cast(int x, kf_dtype_t to) {
    RefNode n;
    n.kind = Kind::cast;
    n.op = uniform(0, 2);
    n.args[0] = x;
    n.dtype = to;
    return add(n);
  }
  // A value of dtype d made from pool node x (a cast when it differs).
  int as_dtype(int x, kf_dtype_t d) { return c.nodes[x].dtype == d ? x : cast(x, d); }

  Case generate() {
    const int n_inputs = uniform(1, 3);
    std::vector<int> pool;  // value nodes (never scalars)
    for (int k = 0; k < n_inputs; ++k) {
      RefNode n;
      n.kind = Kind::input;
      n.dtype = random_dtype();
      n.rank = uniform(0, 4);
      const int id = add(n);
      c.inputs.push_back(id);
      pool.push_back(id);
    }
    const int n_ops = uniform(3, 12);
    for (int k = 0; k < n_ops; ++k) {
      // Later nodes prefer recent values: chains, with some fan-in (DAGs).
      auto pick = [&] {
        const int size = static_cast<int>(pool.size());
        return pool[chance(0.6) ? size - 1 : uniform(0, size - 1)];
      };
      RefNode n;
      const int what = uniform(0, 10);
      const int x = pick();
      const kf_dtype_t d = c.nodes[x].dtype;
      if (what <= 1) {  // unary
        n.kind = Kind::unary;
        n.op = is_integer(d)
                   ? std::vector<int>{KF_UNARY_NEG, KF_UNARY_ABS, KF_UNARY_SQUARE}[uniform(0, 2)]
                   : uniform(0, KF_UNARY_SQUARE);
        n.args[0] = x;
        n.dtype = d;
      } else if (what == 2) {  // activation
        const kf_dtype_t f = is_integer(d) ? kAllDtypes[uniform(0, 3)] : d;
        n.kind = Kind::activation;
        n.op = uniform(0, KF_ACTIVATION_SIGMOID);
        n.args[0] = as_dtype(x, f);
        n.dtype = f;
      } else if (what <= 6) {  // binary or comparison
        const bool compare = what == 6;
        n.kind = Kind::binary;
        n.op = compare ? uniform(KF_BINARY_EQ, KF_BINARY_GE)
                       : uniform(KF_BINARY_ADD, is_integer(d) ? KF_BINARY_MAX : KF_BINARY_POW);
        const int b = chance(0.35) ? scalar(d) : as_dtype(pick(), d);
        const bool swap = chance(0.3);
        n.args[0] = swap ? b : x;
        n.args[1] = swap ? x : b;
        n.dtype = compare ? KF_DTYPE_UINT8 : d;
      } else if (what == 7) {  // clamp between two scalars
        n.kind = Kind::clamp;
        const int lo = scalar(d), hi = scalar(d);
        if (c.nodes[lo].value > c.nodes[hi].value) std::swap(c.nodes[lo].value, c.nodes[hi].value);
        n.args[0] = x;
        n.args[1] = lo;
        n.args[2] = hi;
        n.dtype = d;
      } else if (what == 8) {  // where
        n.kind = Kind::where;
        n.args[0] = pick();
        n.args[1] = x;
        n.args[2] = chance(0.4) ? scalar(d) : as_dtype(pick(), d);
        n.dtype = d;
      } else {  // cast
        const int id = cast(x, random_dtype());
        pool.push_back(id);
        continue;
      }
      pool.push_back(add(n));
    }
    // Outputs: the last value, and up to two others.
    c.outputs.push_back(pool.back());
    for (int k = uniform(0, 2); k > 0; --k) {
      const int o = pool[uniform(0, static_cast<int>(pool.size()) - 1)];
      if (c.nodes[o].kind != Kind::input &&
          std::find(c.outputs.begin(), c.outputs.end(), o) == c.outputs.end())
        c.outputs.push_back(o);
    }
    return c;
  }
};

// Builds the case in ctx, setting node ids; returns the output count marked.
void build(Case& c, kf_graph_t* g) {
  Builder b{g};
  for (RefNode& n : c.nodes) {
    const auto arg = [&](int k) { return c.nodes[n.args[k]].id; };
    switch (n.kind) {
      case Kind::input: n.id = b.tensor(n.dtype, n.rank); break;
      case Kind::scalar: n.id = b.scalar(n.value); break;
      case Kind::unary: n.id = b.unary(static_cast<kf_unary_op_t>(n.op), arg(0)); break;
      case Kind::activation: n.id = b.activation(static_cast<kf_activation_t>(n.op), arg(0)); break;
      case Kind::binary: n.id = b.binary(static_cast<kf_binary_op_t>(n.op), arg(0), arg(1)); break;
      case Kind::clamp: n.id = b.clamp(arg(0), arg(1), arg(2)); break;
      case Kind::where: n.id = b.where(arg(0), arg(1), arg(2)); break;
      case Kind::cast: n.id = b.cast(arg(0), n.dtype, static_cast<kf_cast_mode_t>(n.op)); break;
    }
  }
  for (int o : c.outputs) b.output(c.nodes[o].id);
}

// ---------------------------------------------------------------------------------------------
// The reference.

int64_t truncate_to_int64(double x) {
  if (std::isnan(x)) return 0;
  if (x >= 9223372036854775808.0) return INT64_MAX;
  if (x <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(x);
}

// A launch value met by an operand of dtype d.
Ref value_as(double v, kf_dtype_t d) {
  Ref r;
  if (is_integer(d))
    r.i = fusion_test::wrap(d, static_cast<uint64_t>(truncate_to_int64(v)));
  else
    r.f = fusion_test::round_compute(d, v);
  return r;
}

Ref cast_ref(const Ref& x, kf_dtype_t from, kf_dtype_t to, int mode) {
  Ref r;
  r.unsure = x.unsure;
  const bool saturate = mode != KF_CAST_WRAP;
  if (!is_integer(to)) {
    if (is_integer(from)) {
      if (to == KF_DTYPE_FLOAT32) {
        r.f = static_cast<double>(static_cast<float>(static_cast<long double>(x.i)));
      } else if (to == KF_DTYPE_FLOAT64) {
        r.f = static_cast<double>(x.i);
      } else {
        double v = static_cast<double>(x.i);
        if (saturate) v = std::clamp(v, -max_finite(to), max_finite(to));
        r.f = fusion_test::round_to(to, v);
      }
      return r;
    }
    double v = x.f;
    if (saturate && !std::isnan(v)) v = std::clamp(v, -max_finite(to), max_finite(to));
    r.f = fusion_test::round_to(to, v);
    r.err = x.err > 0 ? x.err + storage_ulp(to) * std::fabs(r.f) : 0.0;
    return r;
  }
  if (is_integer(from)) {
    r.i = saturate ? std::clamp(x.i, fusion_test::integer_min(to), fusion_test::integer_max(to))
                   : fusion_test::wrap(to, static_cast<uint64_t>(x.i));
    return r;
  }
  const bool round = mode == KF_CAST_SATURATE_ROUND;
  auto convert = [&](double v) {
    if (std::isnan(v)) return int64_t{0};
    if (!saturate) return fusion_test::wrap(to, static_cast<uint64_t>(truncate_to_int64(v)));
    if (round) v = std::nearbyint(v);
    const int64_t t = truncate_to_int64(v);
    return std::clamp(t, fusion_test::integer_min(to), fusion_test::integer_max(to));
  };
  r.i = convert(x.f);
  // Within the bound of a rounding boundary (or NaN-ness unknown): the engine may differ.
  if (x.err > 0 &&
      (!std::isfinite(x.err) || convert(x.f - x.err) != r.i || convert(x.f + x.err) != r.i))
    r.unsure = true;
  return r;
}

template <class T>
bool compare_values(int op, T x, T y) {
  switch (op) {
    case KF_BINARY_EQ: return x == y;
    case KF_BINARY_NE: return x != y;
    case KF_BINARY_LT: return x < y;
    case KF_BINARY_LE: return x <= y;
    case KF_BINARY_GT: return x > y;
    default: return x >= y;
  }
}

double activation_ref(int act, double x) {
  return row_test::reference_activation(static_cast<kf_activation_t>(act), x);
}

// One node of the reference for one element, given its arguments' values.
Ref eval(const Case& c, const RefNode& n, const std::vector<Ref>& v) {
  const auto arg = [&](int k) -> const Ref& { return v[n.args[k]]; };
  const auto arg_dtype = [&](int k) {
    const RefNode& a = c.nodes[n.args[k]];
    return a.kind == Kind::scalar ? a.dtype : a.dtype;
  };
  const kf_dtype_t d = n.dtype;
  const double u = unit_roundoff(d);
  Ref r;
  for (int k = 0; k < 3; ++k)
    if (n.args[k] >= 0) r.unsure |= v[n.args[k]].unsure;
  // Floating results: rounded to the compute type; slack for a rounding that may differ when an
  // input is not exact, and `ulps` of the result for functions that are not correctly rounded.
  auto finish = [&](double exact, double propagated, double ulps) {
    r.f = fusion_test::round_compute(d, exact);
    r.err = propagated;
    if (propagated > 0 || ulps > 0) r.err += (1 + ulps) * u * std::fabs(r.f) + tiny(d);
    if (std::isnan(r.err)) r.unsure = true;
    return r;
  };
  switch (n.kind) {
    case Kind::input:
    case Kind::scalar: return r;  // filled by the caller
    case Kind::unary: {
      const Ref& x = arg(0);
      if (is_integer(d)) {
        const uint64_t ux = static_cast<uint64_t>(x.i);
        switch (n.op) {
          case KF_UNARY_NEG: r.i = fusion_test::wrap(d, 0 - ux); break;
          case KF_UNARY_ABS: r.i = x.i < 0 ? fusion_test::wrap(d, 0 - ux) : x.i; break;
          default: r.i = fusion_test::wrap(d, ux * ux); break;
        }
        return r;
      }
      const double a = x.f, e = x.err;
      switch (n.op) {
        case KF_UNARY_NEG: return finish(-a, e, 0);
        case KF_UNARY_ABS: return finish(std::fabs(a), e, 0);
        case KF_UNARY_EXP: {
          const double y = std::exp(a);
          return finish(y, e * y * std::exp(e), 8);
        }
        case KF_UNARY_LOG:
          if (e > 0 && std::fabs(a) <= e) r.unsure = true;
          return finish(std::log(a), e / std::max(std::fabs(a) - e, tiny(d)), 8);
        case KF_UNARY_SQRT:
          if (e > 0 && a <= e) r.unsure = true;
          return finish(std::sqrt(a), e / (2 * std::sqrt(std::max(a - e, tiny(d)))), 0);
        case KF_UNARY_RSQRT:
          if (e > 0 && a <= e) r.unsure = true;
          return finish(1.0 / std::sqrt(a), 0.5 * e * std::pow(std::max(a - e, tiny(d)), -1.5), 1);
        default: return finish(a * a, 2 * std::fabs(a) * e + e * e, 0);
      }
    }
    case Kind::activation: {
      const Ref& x = arg(0);
      // The GELUs lose relative accuracy where 1 + erf(...) cancels: bound by |x| too.
      const double y = activation_ref(n.op, x.f);
      finish(y, 1.2 * x.err, 8);
      if (n.op != KF_ACTIVATION_NONE && n.op != KF_ACTIVATION_RELU)
        r.err += 16 * u * std::fabs(x.f) + 16 * u;
      return r;
    }
    case Kind::binary: {
      const Ref& a = arg(0);
      const Ref& b = arg(1);
      if (n.op >= KF_BINARY_EQ) {
        const kf_dtype_t od = c.nodes[n.args[0]].kind == Kind::scalar ? arg_dtype(1) : arg_dtype(0);
        bool result;
        if (is_integer(od)) {
          result = compare_values(n.op, a.i, b.i);
        } else {
          result = compare_values(n.op, a.f, b.f);
          const double e = a.err + b.err;
          if (e > 0 && !(std::fabs(a.f - b.f) > e)) r.unsure = true;
        }
        r.i = result ? 1 : 0;
        return r;
      }
      if (is_integer(d)) {
        const uint64_t x = static_cast<uint64_t>(a.i), y = static_cast<uint64_t>(b.i);
        switch (n.op) {
          case KF_BINARY_ADD: r.i = fusion_test::wrap(d, x + y); break;
          case KF_BINARY_SUB: r.i = fusion_test::wrap(d, x - y); break;
          case KF_BINARY_MUL: r.i = fusion_test::wrap(d, x * y); break;
          case KF_BINARY_DIV:
            r.i = b.i == 0 ? 0 : b.i == -1 ? fusion_test::wrap(d, 0 - x) : a.i / b.i;
            break;
          case KF_BINARY_MIN: r.i = std::min(a.i, b.i); break;
          default: r.i = std::max(a.i, b.i); break;
        }
        return r;
      }
      const double x = a.f, y = b.f, ex = a.err, ey = b.err;
      switch (n.op) {
        case KF_BINARY_ADD: return finish(x + y, ex + ey, 0);
        case KF_BINARY_SUB: return finish(x - y, ex + ey, 0);
        case KF_BINARY_MUL:
          return finish(x * y, std::fabs(y) * ex + std::fabs(x) * ey + ex * ey, 0);
        case KF_BINARY_DIV: {
          if (ey > 0 && std::fabs(y) <= ey) r.unsure = true;
          const double m = std::max(std::fabs(y) - ey, tiny(d));
          return finish(x / y, ex / m + std::fabs(x) * ey / (m * m), 0);
        }
        case KF_BINARY_MIN:
        case KF_BINARY_MAX: {
          const bool nan = std::isnan(x) || std::isnan(y);
          const double m = nan                     ? (std::isnan(x) ? x : y)
                           : n.op == KF_BINARY_MIN ? (y < x ? y : x)
                                                   : (x < y ? y : x);
          return finish(m, std::max(ex, ey), 0);
        }
        default: {
          const double p = std::pow(x, y);
          if (ex > 0 && std::fabs(x) <= ex) r.unsure = true;
          const double g =
              std::fabs(p) * (std::fabs(y) * ex / std::max(std::fabs(x) - ex, tiny(d)) +
                              std::fabs(std::log(std::fabs(x))) * ey);
          return finish(p, g * (1 + g), 8);
        }
      }
    }
    case Kind::clamp: {
      const Ref& x = arg(0);
      const Ref& lo = arg(1);
      const Ref& hi = arg(2);
      if (is_integer(d)) {
        r.i = std::min(std::max(x.i, lo.i), hi.i);
        return r;
      }
      auto max_nan = [](double a, double b) {
        return std::isnan(a) ? a : std::isnan(b) ? b : (a < b ? b : a);
      };
      auto min_nan = [](double a, double b) {
        return std::isnan(a) ? a : std::isnan(b) ? b : (b < a ? b : a);
      };
      return finish(min_nan(max_nan(x.f, lo.f), hi.f), std::max({x.err, lo.err, hi.err}), 0);
    }
    case Kind::where: {
      const Ref& cond = arg(0);
      const kf_dtype_t cd = c.nodes[n.args[0]].dtype;
      bool truth;
      if (is_integer(cd)) {
        truth = cond.i != 0;
      } else {
        truth = cond.f != 0.0;  // NaN is true
        if (cond.err > 0 && !(std::fabs(cond.f) > cond.err)) r.unsure = true;
      }
      const Ref& chosen = truth ? arg(1) : arg(2);
      const bool unsure = r.unsure || chosen.unsure;
      r = chosen;
      r.unsure = unsure;
      return r;
    }
    case Kind::cast: {
      Ref out = cast_ref(arg(0), c.nodes[n.args[0]].dtype, d, n.op);
      out.unsure |= r.unsure;
      return out;
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Data and launches.

// Nonzero random input values of dtype d (rounded to it).
std::vector<Num> random_input(kf_dtype_t d, size_t n, std::mt19937_64& rng) {
  std::vector<Num> v(n);
  for (Num& x : v) {
    if (is_integer(d)) {
      do {
        const uint64_t bits = rng();
        x.i = fusion_test::wrap(d, d == KF_DTYPE_INT64 && (bits & 1) ? bits >> 20 : bits);
        if (d == KF_DTYPE_INT32 && (bits & 2)) x.i %= 1000;  // small values as well as large
      } while (x.i == 0);
    } else {
      const double magnitude = std::uniform_real_distribution<double>(0.25, 4.0)(rng);
      x.f = fusion_test::round_to(d, (rng() & 1) ? magnitude : -magnitude);
    }
  }
  return v;
}

// The shapes of one item: each input's (broadcastable), and the broadcast shape.
struct ItemShapes {
  std::vector<Shape> inputs;
  Shape out;
};

ItemShapes random_shapes(const Case& c, std::mt19937_64& rng) {
  int32_t rank = 0;
  for (int i : c.inputs) rank = std::max(rank, c.nodes[i].rank);
  Shape full(static_cast<size_t>(rank));
  for (int32_t d = 0; d < rank; ++d) {
    const bool long_inner = d == rank - 1 && rng() % 3 == 0;  // several tiles
    full[d] =
        long_inner ? 200 + static_cast<int64_t>(rng() % 1500) : 1 + static_cast<int64_t>(rng() % 6);
  }
  ItemShapes s;
  s.out = Shape(static_cast<size_t>(rank), 1);
  for (int i : c.inputs) {
    const int32_t r = c.nodes[i].rank;
    Shape shape(static_cast<size_t>(r));
    for (int32_t d = 0; d < r; ++d) {
      const int32_t full_d = d + rank - r;
      shape[d] = rng() % 4 == 0 ? 1 : full[full_d];
      s.out[full_d] = std::max(s.out[full_d], shape[d]);
    }
    s.inputs.push_back(shape);
  }
  return s;
}

// The element of an input (row-major in its shape) that output element `index` reads.
int64_t broadcast_index(const Shape& in, const Shape& out, int64_t index) {
  int64_t result = 0, stride = 1;
  const size_t lead = out.size() - in.size();
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t coord = index % out[d];
    index /= out[d];
    if (d < lead) continue;
    const int64_t extent = in[d - lead];
    result += (extent == 1 ? 0 : coord) * stride;
    stride *= extent;
  }
  return result;
}

// Reference values of every output of one item.
std::vector<std::vector<Ref>> reference(const Case& c, const ItemShapes& shapes,
                                        const std::vector<std::vector<Num>>& inputs,
                                        const std::vector<double>& scalar_values) {
  const int64_t n = kf_test::numel(shapes.out);
  std::vector<std::vector<Ref>> out(c.outputs.size(), std::vector<Ref>(static_cast<size_t>(n)));
  std::vector<Ref> v(c.nodes.size());
  for (int64_t e = 0; e < n; ++e) {
    for (size_t k = 0; k < c.nodes.size(); ++k) {
      const RefNode& node = c.nodes[k];
      if (node.kind == Kind::input) {
        const size_t pos = static_cast<size_t>(
            std::find(c.inputs.begin(), c.inputs.end(), static_cast<int>(k)) - c.inputs.begin());
        const Num& x =
            inputs[pos][static_cast<size_t>(broadcast_index(shapes.inputs[pos], shapes.out, e))];
        v[k] = Ref{x.f, x.i, 0.0, false};
      } else if (node.kind == Kind::scalar) {
        v[k] = value_as(scalar_values[k], node.dtype);
      } else {
        v[k] = eval(c, node, v);
      }
    }
    for (size_t o = 0; o < c.outputs.size(); ++o) {
      Ref r = v[c.outputs[o]];
      const kf_dtype_t d = c.nodes[c.outputs[o]].dtype;
      if (!is_integer(d)) {  // the write rounds to the storage dtype
        const double stored = fusion_test::round_to(d, r.f);
        if (r.err > 0) r.err += storage_ulp(d) * std::fabs(stored);
        r.f = stored;
        if (r.err > 0 && std::fabs(r.f) + r.err >= max_finite(d)) r.unsure = true;
        if (!std::isfinite(r.err)) r.unsure = true;
      }
      out[o][static_cast<size_t>(e)] = r;
    }
  }
  return out;
}

// Counts and reports (the first few) elements where got is not within the reference's bound.
size_t count_mismatches(const std::vector<Num>& got, const std::vector<Ref>& want, kf_dtype_t d,
                        const std::string& what) {
  size_t bad = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const Ref& w = want[k];
    if (w.unsure) continue;
    bool ok;
    if (is_integer(d)) {
      ok = got[k].i == w.i;
    } else if (std::isnan(w.f) || std::isinf(w.f)) {
      ok = w.err > 0 || (std::isnan(w.f) ? std::isnan(got[k].f) : got[k].f == w.f);
    } else {
      ok = std::fabs(got[k].f - w.f) <= w.err + 2 * storage_ulp(d) * std::fabs(w.f);
    }
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << " element " << k << ": got " << fusion_test::show(got[k], d)
                    << ", want " << fusion_test::show(Num{w.f, w.i}, d) << " (bound " << w.err
                    << ")";
  }
  return bad;
}

std::string describe(const Case& c) {
  static const char* kinds[] = {"input",  "scalar", "unary", "activation",
                                "binary", "clamp",  "where", "cast"};
  std::string s;
  for (size_t k = 0; k < c.nodes.size(); ++k) {
    const RefNode& n = c.nodes[k];
    s += "  %" + std::to_string(k) + " = " + kinds[static_cast<int>(n.kind)] + " op " +
         std::to_string(n.op) + " dtype " + row_test::dtype_name(n.dtype) + "/" +
         std::to_string(n.dtype);
    for (int a : n.args)
      if (a >= 0) s += " %" + std::to_string(a);
    if (n.kind == Kind::scalar) s += " value " + std::to_string(n.value);
    if (n.kind == Kind::input) s += " rank " + std::to_string(n.rank);
    s += "\n";
  }
  s += "  outputs:";
  for (int o : c.outputs) s += " %" + std::to_string(o);
  return s;
}

class RandomGraphTest : public row_test::DeviceTest {
 protected:
  // One launch of c's kernel k (built in ctx) over items with the given shapes; every output
  // checked against the reference. Returns the outputs (item-major) for cross-device checks.
  std::vector<std::vector<Num>> run_and_check(
      kf_context_t* ctx, const Case& c, kf_fused_kernel_t* k, const std::vector<ItemShapes>& items,
      const std::vector<std::vector<std::vector<Num>>>& data,
      const std::vector<kf_fused_value_t>& overrides, bool strided, std::mt19937_64& rng) {
    std::vector<double> scalar_values(c.nodes.size());
    for (size_t n = 0; n < c.nodes.size(); ++n) scalar_values[n] = c.nodes[n].value;
    for (const kf_fused_value_t& o : overrides)
      for (size_t n = 0; n < c.nodes.size(); ++n)
        if (c.nodes[n].id == o.node) scalar_values[n] = o.value;

    std::vector<DeviceTensor> inputs, outputs;
    std::vector<const kf_tensor_t*> input_handles;
    std::vector<kf_tensor_t*> output_handles;
    for (size_t item = 0; item < items.size(); ++item) {
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        inputs.push_back(fusion_test::make_tensor(ctx, c.nodes[c.inputs[i]].dtype,
                                                  items[item].inputs[i], strided, rng));
        fusion_test::upload(inputs.back(), data[item][i]);
        input_handles.push_back(inputs.back().handle());
      }
      for (int o : c.outputs) {
        outputs.push_back(
            fusion_test::make_tensor(ctx, c.nodes[o].dtype, items[item].out, strided, rng));
        fusion_test::poison(outputs.back());
        output_handles.push_back(outputs.back().handle());
      }
    }
    const kf_result_t r = fusion_test::launch(k, static_cast<int32_t>(items.size()), input_handles,
                                              output_handles, {}, overrides);
    EXPECT_EQ(r, KF_SUCCESS) << kf_get_last_error_message();
    std::vector<std::vector<Num>> results;
    if (r != KF_SUCCESS) return results;
    for (size_t item = 0; item < items.size(); ++item) {
      const auto want = reference(c, items[item], data[item], scalar_values);
      for (size_t o = 0; o < c.outputs.size(); ++o) {
        const std::string what = "item " + std::to_string(item) + " output " + std::to_string(o) +
                                 " (node %" + std::to_string(c.outputs[o]) + ", shape " +
                                 row_test::shape_str(items[item].out) + ")";
        results.push_back(fusion_test::download(outputs[item * c.outputs.size() + o], what));
        EXPECT_EQ(count_mismatches(results.back(), want[o], c.nodes[c.outputs[o]].dtype, what), 0u)
            << what;
      }
    }
    return results;
  }

  // Random data for items of the given shapes.
  std::vector<std::vector<std::vector<Num>>> random_data(const Case& c,
                                                         const std::vector<ItemShapes>& items,
                                                         std::mt19937_64& rng) {
    std::vector<std::vector<std::vector<Num>>> data;
    for (const ItemShapes& s : items) {
      data.emplace_back();
      for (size_t i = 0; i < c.inputs.size(); ++i)
        data.back().push_back(random_input(c.nodes[c.inputs[i]].dtype,
                                           static_cast<size_t>(kf_test::numel(s.inputs[i])), rng));
    }
    return data;
  }

  // Everything one seed tests: a graph, launched contiguous and strided, with value overrides,
  // and as a horizontal batch of items of different shapes; on CUDA, also against the CPU.
  void run_case(uint64_t seed) {
    Generator gen(seed);
    Case c = gen.generate();
    SCOPED_TRACE("seed " + std::to_string(seed) + " (KF_TEST_SEED=" +
                 std::to_string(row_test::base_seed()) + "), graph:\n" + describe(c));
    const int32_t kMaxItems = 4;
    fusion_test::GraphHandle g(ctx());
    build(c, g);
    fusion_test::KernelHandle k = fusion_test::compile(g, kMaxItems);
    if (!k.k || HasFailure()) return;
    std::mt19937_64& rng = gen.rng;

    // 1. One item, contiguous, then strided views.
    const std::vector<ItemShapes> one{random_shapes(c, rng)};
    const auto data = random_data(c, one, rng);
    run_and_check(ctx(), c, k, one, data, {}, false, rng);
    const auto device_results = run_and_check(ctx(), c, k, one, data, {}, true, rng);

    // 2. New values for the scalars (no recompile: values are launch parameters).
    std::vector<kf_fused_value_t> overrides;
    for (const RefNode& n : c.nodes) {
      if (n.kind != Kind::scalar || gen.chance(0.3)) continue;
      double v = (gen.chance(0.5) ? -1 : 1) * gen.uniform_real(0.25, 3.0);
      if (is_integer(n.dtype))
        v = n.dtype == KF_DTYPE_UINT8 ? gen.uniform(1, 9) : gen.uniform(-9, 9);
      if (v == 0) v = 2;
      overrides.push_back(kf_fused_value_t{n.id, 0, v});
    }
    if (!overrides.empty()) run_and_check(ctx(), c, k, one, data, overrides, gen.chance(0.5), rng);

    // 3. A horizontal batch: items of different shapes in one launch.
    std::vector<ItemShapes> batch;
    for (int i = gen.uniform(2, kMaxItems); i > 0; --i) batch.push_back(random_shapes(c, rng));
    run_and_check(ctx(), c, k, batch, random_data(c, batch, rng), overrides, gen.chance(0.5), rng);

    // 4. CUDA: the CPU backend on the same data must agree (integers bit for bit).
    if (kf_test::device_under_test() == KF_DEVICE_CUDA) {
      fusion_test::ContextHandle cpu(KF_DEVICE_CPU);
      Case cpu_case = c;
      fusion_test::GraphHandle cpu_graph(cpu);
      build(cpu_case, cpu_graph);
      fusion_test::KernelHandle cpu_kernel = fusion_test::compile(cpu_graph, kMaxItems);
      if (!cpu_kernel.k) return;
      const auto cpu_results = run_and_check(cpu, cpu_case, cpu_kernel, one, data, {}, true, rng);
      ASSERT_EQ(cpu_results.size(), device_results.size());
      const auto want = reference(c, one[0], data[0], [&] {
        std::vector<double> values;
        for (const RefNode& n : c.nodes) values.push_back(n.value);
        return values;
      }());
      for (size_t o = 0; o < cpu_results.size(); ++o) {
        const kf_dtype_t d = c.nodes[c.outputs[o]].dtype;
        std::vector<Ref> cpu_as_ref(cpu_results[o].size());
        for (size_t e = 0; e < cpu_as_ref.size(); ++e) {
          cpu_as_ref[e] =
              Ref{cpu_results[o][e].f, cpu_results[o][e].i, 2 * want[o][e].err, want[o][e].unsure};
        }
        EXPECT_EQ(count_mismatches(device_results[o], cpu_as_ref, d,
                                   "CUDA vs CPU, output " + std::to_string(o)),
                  0u);
      }
    }
  }
};

// In NVRTC builds every graph is also compiled for sm_80 and sm_90: the count is kept moderate.
// The cases come in blocks, one test each, so that the GPU proof's GoogleTest shards of this
// binary share them (48 cases in one test took 270 s of the proof's 311 s of ctest at
// 2026-12-02 06:12Z); the seeds are those of the one test they replace.
constexpr uint64_t kCases = 48;
constexpr uint64_t kCaseBlocks = 4;

class RandomGraphCases : public RandomGraphTest, public ::testing::WithParamInterface<uint64_t> {};

TEST_P(RandomGraphCases, RandomGraphsMatchTheFloat64Reference) {
  const uint64_t per_block = kCases / kCaseBlocks;
  for (uint64_t i = GetParam() * per_block; i < (GetParam() + 1) * per_block && !HasFatalFailure();
       ++i) {
    run_case(row_test::base_seed() * 1000 + i);
    if (HasFailure()) break;  // one failing seed is enough to read
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, RandomGraphCases, ::testing::Range<uint64_t>(0, kCaseBlocks));
static_assert(kCases % kCaseBlocks == 0, "every block holds the same number of cases");

// Edge values the random data rarely hits: integer overflow, division by zero and by -1,
// INT_MIN, NaN and infinities through casts in every mode.
TEST_F(RandomGraphTest, IntegerWrapAndCastEdges) {
  fusion_test::GraphHandle g(ctx());
  Builder b{g};
  const int32_t a = b.tensor(KF_DTYPE_INT32, 1);
  const int32_t d = b.tensor(KF_DTYPE_INT32, 1);
  const int32_t f = b.tensor(KF_DTYPE_FLOAT32, 1);
  b.output(b.binary(KF_BINARY_DIV, a, d));                      // 0: truncating, x / 0 = 0
  b.output(b.binary(KF_BINARY_MUL, a, d));                      // 1: wraps
  b.output(b.cast(a, KF_DTYPE_INT8, KF_CAST_WRAP));             // 2
  b.output(b.cast(a, KF_DTYPE_UINT8, KF_CAST_SATURATE));        // 3
  b.output(b.cast(f, KF_DTYPE_UINT8, KF_CAST_SATURATE_ROUND));  // 4: ties to even
  b.output(b.cast(f, KF_DTYPE_INT8, KF_CAST_WRAP));             // 5: NaN 0, huge clamps to int64
  b.output(b.cast(f, KF_DTYPE_FLOAT16, KF_CAST_SATURATE));      // 6: +-65504
  b.output(b.cast(f, KF_DTYPE_FLOAT16, KF_CAST_WRAP));          // 7: +-inf
  b.output(b.unary(KF_UNARY_ABS, b.cast(a, KF_DTYPE_INT8, KF_CAST_WRAP)));  // 8: abs(-128)
  fusion_test::KernelHandle k = fusion_test::compile(g);
  ASSERT_NE(k.k, nullptr);

  const int64_t int_min = INT32_MIN;
  const std::vector<int64_t> as = {7, -7, int_min, int_min, 300, -129, 2147483647, 1000};
  const std::vector<int64_t> ds = {2, 2, -1, 1, 0, 3, 2, -3};
  const std::vector<double> fs = {2.5, 3.5, -0.5, 255.5, NAN, 1e30, -1e30, 70000.0};
  const size_t n = as.size();
  std::mt19937_64 rng(1);
  auto to_nums_i = [](const std::vector<int64_t>& v) {
    std::vector<Num> r;
    for (int64_t x : v) r.push_back(Num{0, x});
    return r;
  };
  std::vector<Num> fnums;
  for (double x : fs) fnums.push_back(Num{x, 0});
  DeviceTensor ta = fusion_test::make_tensor(ctx(), KF_DTYPE_INT32, {int64_t(n)}, false, rng);
  DeviceTensor td = fusion_test::make_tensor(ctx(), KF_DTYPE_INT32, {int64_t(n)}, false, rng);
  DeviceTensor tf = fusion_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, {int64_t(n)}, false, rng);
  fusion_test::upload(ta, to_nums_i(as));
  fusion_test::upload(td, to_nums_i(ds));
  fusion_test::upload(tf, fnums);
  const kf_dtype_t out_dtypes[] = {KF_DTYPE_INT32,   KF_DTYPE_INT32,   KF_DTYPE_INT8,
                                   KF_DTYPE_UINT8,   KF_DTYPE_UINT8,   KF_DTYPE_INT8,
                                   KF_DTYPE_FLOAT16, KF_DTYPE_FLOAT16, KF_DTYPE_INT8};
  std::vector<DeviceTensor> outs;
  std::vector<kf_tensor_t*> out_handles;
  for (kf_dtype_t dt : out_dtypes) {
    outs.push_back(fusion_test::make_tensor(ctx(), dt, {int64_t(n)}, false, rng));
    out_handles.push_back(outs.back().handle());
  }

  const std::vector<std::vector<double>> want = {
      {3, -3, int_min, int_min, 0, -43, 1073741823, -333},
      {14, -14, int_min, int_min, 0, -387, -2, -3000},
      {7, -7, 0, 0, 44, 127, -1, -24},
      {7, 0, 0, 0, 255, 0, 255, 255},
      {2, 4, 0, 255, 0, 255, 0, 255},
      {2, 3, 0, -1, 0, -1, 0, 112},
      {2.5, 3.5, -0.5, 255.5, NAN, 65504, -65504, 65504},
      {2.5, 3.5, -0.5, 255.5, NAN, INFINITY, -INFINITY, INFINITY},
      {7, 7, 0, 0, 44, 127, 1, 24},
  };
  // Two passes with different poison: 0xFF reads back as 255 (uint8), -1 (int8) and NaN (f16),
  // each of them an expected value somewhere above, so an element left unwritten is caught only
  // in the pass whose poison differs from its expected value.
  for (const unsigned char byte : {0xFF, 0x5A}) {
    SCOPED_TRACE("outputs poisoned with bytes of " + std::to_string(byte));
    for (const DeviceTensor& o : outs) fusion_test::poison(o, byte);
    KF_ASSERT_OK(fusion_test::launch(k, 1, {ta.handle(), td.handle(), tf.handle()}, out_handles));
    for (size_t o = 0; o < want.size(); ++o) {
      const auto got = fusion_test::download(outs[o], "output " + std::to_string(o));
      for (size_t e = 0; e < n; ++e) {
        const double value = is_integer(out_dtypes[o]) ? static_cast<double>(got[e].i) : got[e].f;
        if (std::isnan(want[o][e]))
          EXPECT_TRUE(std::isnan(value)) << "output " << o << " element " << e;
        else
          EXPECT_EQ(value, want[o][e]) << "output " << o << " element " << e;
      }
    }
  }
}

// One compiled kernel launched from 4 threads at once, each on its own stream and tensors.
TEST_F(RandomGraphTest, ConcurrentLaunchesOfOneKernel) {
  fusion_test::GraphHandle g(ctx());
  Builder b{g};
  const int32_t x = b.tensor(KF_DTYPE_FLOAT32, 2);
  const int32_t scale = b.scalar(2.0);
  b.output(b.binary(KF_BINARY_ADD, b.binary(KF_BINARY_MUL, x, scale), b.scalar(1.0)));
  fusion_test::KernelHandle k = fusion_test::compile(g);
  ASSERT_NE(k.k, nullptr);
  const int kThreads = 4, kLaunches = 10;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      kf_stream_t* stream = nullptr;
      if (kf_stream_create(ctx(), nullptr, &stream) != KF_SUCCESS) {
        failures[t] = kf_get_last_error_message();
        return;
      }
      const Shape shape = {37, 301 + t};
      for (int launch = 0; launch < kLaunches && failures[t].empty(); ++launch) {
        const std::vector<Num> in = random_input(KF_DTYPE_FLOAT32, 37 * (301 + t), rng);
        DeviceTensor input = fusion_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, shape, false, rng);
        DeviceTensor output = fusion_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, shape, true, rng);
        fusion_test::upload(input, in);
        fusion_test::poison(output);
        // A scale per launch, so that launches cannot stand in for each other.
        const kf_fused_value_t value = {scale, 0, 1.0 + launch + 10 * t};
        if (fusion_test::launch(k, 1, {input.handle()}, {output.handle()}, {}, {value}, stream) !=
                KF_SUCCESS ||
            kf_stream_synchronize(stream) != KF_SUCCESS) {
          failures[t] = kf_get_last_error_message();
          break;
        }
        const std::vector<Num> got = fusion_test::download(output, "concurrent output");
        for (size_t e = 0; e < got.size(); ++e) {
          const float want = static_cast<float>(in[e].f) * static_cast<float>(value.value) + 1.0f;
          if (got[e].f != want) {
            failures[t] = "thread " + std::to_string(t) + " launch " + std::to_string(launch) +
                          " element " + std::to_string(e) + ": got " + std::to_string(got[e].f) +
                          ", want " + std::to_string(want);
            break;
          }
        }
      }
      kf_stream_destroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& f : failures) EXPECT_EQ(f, "");
}

// Launches queued back to back, each reading the one before's output through a transposed view,
// so that every block reads what many blocks of the previous kernel wrote. On sm_90 fused
// kernels are programmatic dependent launches, right only because each kernel waits for the one
// before it (griddepcontrol.wait, its first instruction). The graph is heavy enough to run as
// resident blocks looping over the elements (kernel_params.cpp): a kernel lets the next one
// start once all its blocks have started, which is then well before it finishes.
TEST_F(RandomGraphTest, BackToBackLaunchesSeeEachOthersResults) {
  fusion_test::GraphHandle g(ctx());
  Builder b{g};
  const int32_t x = b.tensor(KF_DTYPE_FLOAT32, 2);
  const int32_t y = b.tensor(KF_DTYPE_FLOAT32, 1);
  // x + y, times 128 and back in 14 exact divisions (7 element_cost units each).
  int32_t v = b.binary(KF_BINARY_ADD, x, y);
  for (int i = 0; i < 7; ++i) v = b.binary(KF_BINARY_DIV, v, b.scalar(0.5));
  for (int i = 0; i < 7; ++i) v = b.binary(KF_BINARY_DIV, v, b.scalar(2.0));
  b.output(v);
  size_t length = 0;
  KF_ASSERT_OK(kf_graph_get_source(g, nullptr, nullptr, 0, &length));
  std::string source(length, '\0');
  KF_ASSERT_OK(kf_graph_get_source(g, nullptr, &source[0], length, &length));
  EXPECT_NE(source.find("constexpr int kUnroll = 1;"), std::string::npos)
      << "the graph no longer runs as looping resident blocks";
  fusion_test::KernelHandle k = fusion_test::compile(g);
  ASSERT_NE(k.k, nullptr);
#if defined(KF_TEST_CUDA)
  constexpr int64_t n = 3072;  // 9.4 M elements: several per thread of the resident blocks
#else
  constexpr int64_t n = 384;
#endif
  constexpr int kLaunches = 20;
  kf_test::Tensor p = kf_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, {n, n});
  kf_test::Tensor q = kf_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, {n, n});
  kf_test::Tensor bias = kf_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, {n});
  // Whole numbers, small enough to stay exact in f32 through every step.
  std::mt19937 rng(20261129u);
  std::vector<double> current(static_cast<size_t>(n * n)), bias_values(static_cast<size_t>(n));
  for (double& e : current) e = static_cast<double>(static_cast<int>(rng() % 17) - 8);
  for (double& e : bias_values) e = static_cast<double>(static_cast<int>(rng() % 7) - 3);
  kf_test::upload(p, current);
  kf_test::upload(bias, bias_values);
  kf_test::poison(q);
  const kf_tensor_desc_t transposed = kf_test::make_desc(KF_DTYPE_FLOAT32, {n, n}, {1, n});
  kf_tensor_t *p_view = nullptr, *q_view = nullptr;
  KF_ASSERT_OK(kf_tensor_create_view(p, &transposed, 0, &p_view));
  kf_test::Tensor p_transposed(p_view);
  KF_ASSERT_OK(kf_tensor_create_view(q, &transposed, 0, &q_view));
  kf_test::Tensor q_transposed(q_view);
  // Every launch queued first (the reference is computed after: the host must not fall behind).
  for (int i = 0; i < kLaunches; ++i) {
    const bool from_p = i % 2 == 0;
    KF_ASSERT_OK(fusion_test::launch(k, 1, {from_p ? p_transposed.t : q_transposed.t, bias.t},
                                     {from_p ? q.t : p.t}, {}, {}));
  }
  std::vector<double> next(current.size());
  for (int i = 0; i < kLaunches; ++i) {
    // out[r][c] = in[c][r] + bias[c]
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c)
        next[static_cast<size_t>(r * n + c)] =
            current[static_cast<size_t>(c * n + r)] + bias_values[static_cast<size_t>(c)];
    current.swap(next);
  }
  kf_test::expect_close(kf_test::download(kLaunches % 2 == 0 ? p : q), current, 0,
                        "20 launches, each reading the last one's output transposed");
}

// A node marked as two outputs (one dense, one strided) fills both.
TEST_F(RandomGraphTest, NodeMarkedAsTwoOutputs) {
  fusion_test::GraphHandle g(ctx());
  Builder b{g};
  const int32_t x = b.tensor(KF_DTYPE_FLOAT32, 1);
  const int32_t y = b.binary(KF_BINARY_MUL, x, b.scalar(3.0));
  b.output(y);
  b.output(y);
  b.output(b.binary(KF_BINARY_ADD, y, b.scalar(1.0)));
  fusion_test::KernelHandle k = fusion_test::compile(g);
  ASSERT_NE(k.k, nullptr);
  std::mt19937_64 rng(7);
  const int64_t n = 3000;
  const std::vector<Num> in = random_input(KF_DTYPE_FLOAT32, static_cast<size_t>(n), rng);
  DeviceTensor input = fusion_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, {n}, false, rng);
  fusion_test::upload(input, in);
  std::vector<DeviceTensor> outs;
  for (bool strided : {false, true, false}) {
    outs.push_back(fusion_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, {n}, strided, rng));
    fusion_test::poison(outs.back());
  }
  KF_ASSERT_OK(fusion_test::launch(k, 1, {input.handle()},
                                   {outs[0].handle(), outs[1].handle(), outs[2].handle()}));
  for (size_t o = 0; o < outs.size(); ++o) {
    const std::vector<Num> got = fusion_test::download(outs[o], "output " + std::to_string(o));
    for (size_t e = 0; e < got.size(); ++e) {
      const float product = static_cast<float>(in[e].f) * 3.0f;
      const float want = o == 2 ? product + 1.0f : product;
      ASSERT_EQ(got[e].f, want) << "output " << o << " element " << e;
    }
  }
}

// Float division, sqrt and rsqrt are correctly rounded bit for bit on both backends, whatever
// the operands (core/math/fusion_ops.hpp: the device's fast paths must fall back to the exact
// functions wherever they are not exact): random bit patterns of every exponent, the fast paths'
// range limits, zeros, subnormals, infinities and NaN; a tensor divisor, a launch-value divisor
// (inside and outside the fast range), a chain; dense outputs (the vector path, with a tail) and
// strided ones (the element path). The expectations are the host's IEEE float operations.
TEST_F(RandomGraphTest, FloatDivisionAndRootsAreCorrectlyRounded) {
  fusion_test::GraphHandle g(ctx());
  Builder b{g};
  const int32_t x = b.tensor(KF_DTYPE_FLOAT32, 1);
  const int32_t y = b.tensor(KF_DTYPE_FLOAT32, 1);
  const int32_t s = b.scalar(0.7);
  const int32_t root = b.unary(KF_UNARY_SQRT, x);
  b.output(b.binary(KF_BINARY_DIV, x, y));
  b.output(b.binary(KF_BINARY_DIV, x, s));
  b.output(root);
  b.output(b.unary(KF_UNARY_RSQRT, x));
  b.output(b.binary(KF_BINARY_DIV, root, y));
  fusion_test::KernelHandle k = fusion_test::compile(g);
  ASSERT_NE(k.k, nullptr);

  std::mt19937_64 rng(1234);
  const float kSpecial[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            0x1.fffffcp-127f,  // the largest subnormal
                            std::numeric_limits<float>::min(),
                            0x1p-101f,
                            std::nextafter(0x1p-101f, 0.0f),
                            0x1p-60f,
                            std::nextafter(0x1p-60f, 0.0f),
                            -0x1p-60f,
                            0x1p61f,
                            std::nextafter(0x1p61f, 0.0f),
                            -0x1p61f,
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            INFINITY,
                            -INFINITY,
                            NAN,
                            1.0f,
                            -1.0f,
                            3.0f,
                            0.1f,
                            0x1.fffffep0f,
                            0x1.000002p0f};
  const size_t n_special = sizeof kSpecial / sizeof kSpecial[0];
  const size_t n = 8195;  // not a multiple of any vector width: the vector path has a tail
  std::vector<float> xs(n), ys(n);
  auto random_float = [&](size_t i) {
    if (i % 3 == 0) {  // any bit pattern: every exponent, NaNs and infinities included
      uint32_t u = static_cast<uint32_t>(rng());
      float f;
      std::memcpy(&f, &u, sizeof f);
      return f;
    }
    const float m = std::uniform_real_distribution<float>(0.25f, 4.0f)(rng);
    return (rng() & 1) ? -m : m;
  };
  for (size_t i = 0; i < n; ++i) {
    // Every pair of specials somewhere, then random values.
    xs[i] = i < n_special * n_special ? kSpecial[i / n_special] : random_float(i);
    ys[i] = i < n_special * n_special ? kSpecial[i % n_special] : random_float(i + 1);
  }
  auto nums = [](const std::vector<float>& v) {
    std::vector<Num> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i].f = v[i];
    return r;
  };
  DeviceTensor tx = fusion_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, {int64_t(n)}, false, rng);
  DeviceTensor ty = fusion_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, {int64_t(n)}, false, rng);
  fusion_test::upload(tx, nums(xs));
  fusion_test::upload(ty, nums(ys));

  auto same = [](float a, float b) {
    if (std::isnan(a) && std::isnan(b)) return true;
    uint32_t ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    return ua == ub;
  };
  for (const float divisor : {0.7f, 3.0f, 1e-30f, -0.0f}) {
    for (const bool strided : {false, true}) {
      SCOPED_TRACE(std::string("scalar divisor ") + std::to_string(divisor) +
                   (strided ? ", strided outputs" : ", dense outputs"));
      std::vector<DeviceTensor> outs;
      std::vector<kf_tensor_t*> handles;
      for (int o = 0; o < 5; ++o) {
        outs.push_back(
            fusion_test::make_tensor(ctx(), KF_DTYPE_FLOAT32, {int64_t(n)}, strided, rng));
        fusion_test::poison(outs.back());
        handles.push_back(outs.back().handle());
      }
      KF_ASSERT_OK(fusion_test::launch(k, 1, {tx.handle(), ty.handle()}, handles, {},
                                       {kf_fused_value_t{s, 0, divisor}}));
      std::vector<std::vector<Num>> got;
      for (int o = 0; o < 5; ++o)
        got.push_back(fusion_test::download(outs[o], "output " + std::to_string(o)));
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        const float r = std::sqrt(xs[i]);
        const float want[5] = {xs[i] / ys[i], xs[i] / divisor, r, 1.0f / r, r / ys[i]};
        for (int o = 0; o < 5; ++o) {
          const float value = static_cast<float>(got[o][i].f);
          if (!same(value, want[o]) && bad++ < 10)
            ADD_FAILURE() << "output " << o << " element " << i << " (x " << xs[i] << ", y "
                          << ys[i] << "): got " << value << ", want " << want[o];
        }
      }
      ASSERT_EQ(bad, 0u);
    }
  }
}

// The chains of kf-bench --suite fusion (mul, add, max, sub, min, neg, mul, add, abs, add, rsqrt,
// mul, sub, ReLU, divide, max, each binary op with a scalar; the first 11 or all 16) in bf16 and
// f32, bit for bit against the CPU executor (every op is correctly rounded or exact): sizes
// from one element to several blocks' vectors and a tail (on CUDA also more than one pass of a
// resident grid), signed zeros and NaNs among the inputs, the builder's values and overridden
// launch values.
TEST_F(RandomGraphTest, BenchmarkChainsMatchTheCpuBitForBit) {
  enum StepKind { kBinary, kUnary, kRelu };
  struct Step {
    StepKind kind;
    int op;
    double value;
  };
  static const Step kChain[] = {{kBinary, KF_BINARY_MUL, 1.5},   {kBinary, KF_BINARY_ADD, 0.25},
                                {kBinary, KF_BINARY_MAX, -1.0},  {kBinary, KF_BINARY_SUB, 0.5},
                                {kBinary, KF_BINARY_MIN, 2.5},   {kUnary, KF_UNARY_NEG, 0},
                                {kBinary, KF_BINARY_MUL, 0.75},  {kBinary, KF_BINARY_ADD, 0.375},
                                {kUnary, KF_UNARY_ABS, 0},       {kBinary, KF_BINARY_ADD, 1.0},
                                {kUnary, KF_UNARY_RSQRT, 0},     {kBinary, KF_BINARY_MUL, 2.0},
                                {kBinary, KF_BINARY_SUB, 0.5},   {kRelu, 0, 0},
                                {kBinary, KF_BINARY_DIV, 0.625}, {kBinary, KF_BINARY_MAX, 0.125}};
  // Builds the first n_ops steps over a rank-1 input; returns the scalars' node ids.
  auto build = [](kf_graph_t* g, kf_dtype_t dtype, int n_ops) {
    Builder b{g};
    std::vector<int32_t> scalars;
    int32_t v = b.tensor(dtype, 1);
    for (int k = 0; k < n_ops; ++k) {
      const Step& step = kChain[k];
      if (step.kind == kBinary) {
        scalars.push_back(b.scalar(step.value));
        v = b.binary(static_cast<kf_binary_op_t>(step.op), v, scalars.back());
      } else if (step.kind == kUnary) {
        v = b.unary(static_cast<kf_unary_op_t>(step.op), v);
      } else {
        v = b.activation(KF_ACTIVATION_RELU, v);
      }
    }
    b.output(v);
    return scalars;
  };
  auto same = [](double a, double b) {
    return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
  };
  // The chain as docs/fusion.md defines it, written out here independently of both executors:
  // every op in f32 and correctly rounded (each computed in double, exact for these operands, and
  // rounded to float once, so no contraction can change it), the scalars converted to float, min
  // and max as IEEE 754-2019 minimum and maximum (NaN if either is NaN, -0 below +0), ReLU as
  // maximum(x, +0), rsqrt as 1 / sqrt with both rounded; a 16-bit result rounded once, when
  // written. `values` are the scalars in node order.
  auto chain_reference = [](double in, kf_dtype_t dtype, int n_ops,
                            const std::vector<double>& values) {
    auto f = [](double v) { return static_cast<double>(static_cast<float>(v)); };
    double x = in;  // a bf16 or f32 input is exact in float
    size_t next = 0;
    for (int k = 0; k < n_ops; ++k) {
      const Step& step = kChain[k];
      if (step.kind == kBinary) {
        const double v = f(values[next++]);
        switch (step.op) {
          case KF_BINARY_MUL: x = f(x * v); break;
          case KF_BINARY_ADD: x = f(x + v); break;
          case KF_BINARY_SUB: x = f(x - v); break;
          case KF_BINARY_DIV: x = f(x / v); break;
          case KF_BINARY_MAX: x = ieee_maximum(x, v); break;
          case KF_BINARY_MIN: x = ieee_minimum(x, v); break;
          default: ADD_FAILURE() << "chain_reference: op " << step.op; return 0.0;
        }
      } else if (step.kind == kUnary) {
        switch (step.op) {
          case KF_UNARY_NEG: x = -x; break;
          case KF_UNARY_ABS: x = std::fabs(x); break;
          case KF_UNARY_RSQRT: x = f(1.0 / f(std::sqrt(x))); break;
          default: ADD_FAILURE() << "chain_reference: unary op " << step.op; return 0.0;
        }
      } else {
        x = ieee_maximum(x, 0.0);
      }
    }
    return fusion_test::round_to(dtype, x);
  };
  // The scalars' values of the first n_ops steps, with the launch's overrides of the first and
  // the last scalar when given.
  auto chain_values = [](int n_ops, const std::vector<kf_fused_value_t>& overrides) {
    std::vector<double> values;
    for (int k = 0; k < n_ops; ++k)
      if (kChain[k].kind == kBinary) values.push_back(kChain[k].value);
    if (!overrides.empty()) {
      values.front() = overrides.front().value;
      values.back() = overrides.back().value;
    }
    return values;
  };
  fusion_test::ContextHandle cpu(KF_DEVICE_CPU);
  std::mt19937_64 rng(2026);
  std::vector<int64_t> sizes = {1, 4095, 5 * 4096 + 7};
  // On CUDA also sizes where every thread of a heavy chain's four waves of resident blocks
  // loops two or more times (kernel_params.cpp, cuda_program.cpp).
  if (kf_test::device_under_test() == KF_DEVICE_CUDA) {
    sizes.push_back((int64_t{1} << 22) + 4095);
    sizes.push_back((int64_t{1} << 24) + 4095);
  }
  // The source a graph reports is the one its kernel was compiled from: the layout (one pass or
  // looping blocks) depends on the device's balance, and both must use the context's.
  auto source_of = [](kf_graph_t* g, const kf_compile_options_t* options,
                      const kf_fused_kernel_t* k) {
    std::string from_graph, from_kernel;
    size_t length = 0;
    EXPECT_EQ(kf_graph_get_source(g, options, nullptr, 0, &length), KF_SUCCESS);
    from_graph.assign(length, '\0');
    EXPECT_EQ(kf_graph_get_source(g, options, &from_graph[0], length, &length), KF_SUCCESS);
    EXPECT_EQ(kf_fused_kernel_get_source(k, nullptr, 0, &length), KF_SUCCESS);
    from_kernel.assign(length, '\0');
    EXPECT_EQ(kf_fused_kernel_get_source(k, &from_kernel[0], length, &length), KF_SUCCESS);
    return std::make_pair(from_graph, from_kernel);
  };
  for (const kf_dtype_t dtype : {KF_DTYPE_BFLOAT16, KF_DTYPE_FLOAT32}) {
    for (const int n_ops : {11, 16}) {
      fusion_test::GraphHandle g(ctx()), cpu_graph(cpu);
      const std::vector<int32_t> scalars = build(g, dtype, n_ops);
      build(cpu_graph, dtype, n_ops);  // the same node ids
      constexpr int32_t kItems = 3;    // the batched launch below
      kf_compile_options_t options = KF_COMPILE_OPTIONS_INIT;
      options.max_items = kItems;
      fusion_test::KernelHandle k = fusion_test::compile(g, kItems);
      fusion_test::KernelHandle cpu_kernel;
      KF_ASSERT_OK(kf_graph_compile(cpu_graph, &options, &cpu_kernel.k));
      ASSERT_NE(k.k, nullptr);
      if (kf_test::device_under_test() == KF_DEVICE_CUDA) {
        const auto sources = source_of(g, &options, k.k);
        EXPECT_GT(sources.first.size(), 1u);
        EXPECT_EQ(sources.first, sources.second);
      }
      // The first scalar and the last (the divisor of the 16-op chain) overridden.
      const std::vector<kf_fused_value_t> overrides = {{scalars.front(), 0, -0.75},
                                                       {scalars.back(), 0, -3.0}};
      for (const int64_t n : sizes) {
        std::vector<Num> in = random_input(dtype, static_cast<size_t>(n), rng);
        for (size_t e = 0; e < in.size(); ++e) {
          if (e % 61 == 5) in[e].f = -0.0;
          if (e % 67 == 6) in[e].f = 0.0;
          if (e % 1009 == 7) in[e].f = std::numeric_limits<double>::quiet_NaN();
        }
        for (const bool override_values : {false, true}) {
          SCOPED_TRACE(std::string(row_test::dtype_name(dtype)) + ", " + std::to_string(n_ops) +
                       " ops, " + std::to_string(n) + " elements" +
                       (override_values ? ", values overridden" : ""));
          const std::vector<kf_fused_value_t> values =
              override_values ? overrides : std::vector<kf_fused_value_t>{};
          std::vector<std::vector<Num>> got;
          for (kf_context_t* c : {ctx(), static_cast<kf_context_t*>(cpu)}) {
            DeviceTensor input = fusion_test::make_tensor(c, dtype, {n}, false, rng);
            DeviceTensor output = fusion_test::make_tensor(c, dtype, {n}, false, rng);
            fusion_test::upload(input, in);
            // Different poisons: an element neither run writes cannot match between them.
            fusion_test::poison(output, c == ctx() ? 0xFF : 0x5A);
            KF_ASSERT_OK(fusion_test::launch(c == ctx() ? k.k : cpu_kernel.k, 1, {input.handle()},
                                             {output.handle()}, {}, values));
            got.push_back(fusion_test::download(output, "chain output"));
          }
          const std::vector<double> scalar_values = chain_values(n_ops, values);
          size_t bad = 0;
          for (size_t e = 0; e < got[0].size(); ++e) {
            if (!same(got[0][e].f, got[1][e].f) && bad++ < 10)
              ADD_FAILURE() << "element " << e << " (x " << in[e].f << "): got " << got[0][e].f
                            << ", the CPU " << got[1][e].f;
            const double want = chain_reference(in[e].f, dtype, n_ops, scalar_values);
            if (!same(got[1][e].f, want) && bad++ < 10)
              ADD_FAILURE() << "element " << e << " (x " << in[e].f << "): the CPU gives "
                            << got[1][e].f << ", the chain's definition " << want;
          }
          ASSERT_EQ(bad, 0u);
        }
      }
      // One launch of items of different sizes: the blocks take the items in turn (on CUDA a
      // heavy chain's resident blocks stage each item's loads in shared memory: nothing of one
      // item may reach the next).
      SCOPED_TRACE(std::string(row_test::dtype_name(dtype)) + ", " + std::to_string(n_ops) +
                   " ops, a batch of " + std::to_string(kItems) + " items");
      const int64_t batch[kItems] = {sizes.back(), 1, 5 * 4096 + 7};
      std::vector<std::vector<Num>> ins;
      for (const int64_t n : batch) {
        ins.push_back(random_input(dtype, static_cast<size_t>(n), rng));
        for (size_t e = 0; e < ins.back().size(); e += 97) ins.back()[e].f = -0.0;
      }
      std::vector<std::vector<std::vector<Num>>> got;
      for (kf_context_t* c : {ctx(), static_cast<kf_context_t*>(cpu)}) {
        std::vector<DeviceTensor> inputs, outputs;
        std::vector<const kf_tensor_t*> in_handles;
        std::vector<kf_tensor_t*> out_handles;
        for (int i = 0; i < kItems; ++i) {
          inputs.push_back(fusion_test::make_tensor(c, dtype, {batch[i]}, false, rng));
          outputs.push_back(fusion_test::make_tensor(c, dtype, {batch[i]}, false, rng));
          fusion_test::upload(inputs.back(), ins[static_cast<size_t>(i)]);
          fusion_test::poison(outputs.back(), c == ctx() ? 0xFF : 0x5A);
          in_handles.push_back(inputs.back().handle());
          out_handles.push_back(outputs.back().handle());
        }
        KF_ASSERT_OK(
            fusion_test::launch(c == ctx() ? k.k : cpu_kernel.k, kItems, in_handles, out_handles));
        got.emplace_back();
        for (const DeviceTensor& o : outputs)
          got.back().push_back(fusion_test::download(o, "item"));
      }
      const std::vector<double> scalar_values = chain_values(n_ops, {});
      for (int i = 0; i < kItems; ++i) {
        size_t bad = 0;
        for (size_t e = 0; e < got[0][i].size(); ++e) {
          if (!same(got[0][i][e].f, got[1][i][e].f) && bad++ < 10)
            ADD_FAILURE() << "item " << i << " element " << e << ": got " << got[0][i][e].f
                          << ", the CPU " << got[1][i][e].f;
          const double want =
              chain_reference(ins[static_cast<size_t>(i)][e].f, dtype, n_ops, scalar_values);
          if (!same(got[1][i][e].f, want) && bad++ < 10)
            ADD_FAILURE() << "item " << i << " element " << e << ": the CPU gives "
                          << got[1][i][e].f << ", the chain's definition " << want;
        }
        ASSERT_EQ(bad, 0u) << "item " << i;
      }
    }
  }
}

// ReLU is max(x, +0) with NaN propagating, bit for bit on both backends: negative values and
// both zeros give +0, NaN stays NaN, +inf stays +inf. Dense (the vector path and its tail) and
// strided outputs, f32, bf16 and f64.
TEST_F(RandomGraphTest, ReluGivesPositiveZeroAndPropagatesNaN) {
  const double kValues[] = {-0.0, 0.0, -1.0, 1.0, -1e-30, 1e-30, -INFINITY, INFINITY, NAN, 2.5};
  const size_t m = sizeof kValues / sizeof kValues[0];
  for (const kf_dtype_t dtype : {KF_DTYPE_FLOAT32, KF_DTYPE_BFLOAT16, KF_DTYPE_FLOAT64}) {
    SCOPED_TRACE(row_test::dtype_name(dtype));
    fusion_test::GraphHandle g(ctx());
    Builder b{g};
    b.output(b.activation(KF_ACTIVATION_RELU, b.tensor(dtype, 1)));
    fusion_test::KernelHandle k = fusion_test::compile(g);
    ASSERT_NE(k.k, nullptr);
    const int64_t n = 1027;
    std::vector<Num> in(static_cast<size_t>(n));
    for (size_t e = 0; e < in.size(); ++e) in[e].f = kValues[e % m];
    std::mt19937_64 rng(11);
    DeviceTensor input = fusion_test::make_tensor(ctx(), dtype, {n}, false, rng);
    fusion_test::upload(input, in);
    const std::vector<Num> stored = fusion_test::download(input, "input");  // rounded to dtype
    for (const bool strided : {false, true}) {
      DeviceTensor output = fusion_test::make_tensor(ctx(), dtype, {n}, strided, rng);
      fusion_test::poison(output);
      KF_ASSERT_OK(fusion_test::launch(k, 1, {input.handle()}, {output.handle()}));
      const std::vector<Num> got = fusion_test::download(output, "relu");
      for (size_t e = 0; e < got.size(); ++e) {
        const double x = stored[e].f;
        const double want = std::isnan(x) ? x : (x > 0 ? x : 0.0);
        const double value = got[e].f;
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(value)) << "element " << e;
        } else {
          ASSERT_EQ(value, want) << "element " << e << " (x " << x << ")";
          ASSERT_FALSE(std::signbit(value)) << "element " << e << " (x " << x << ")";
        }
      }
    }
  }
}

// Float min and max are IEEE 754-2019 minimum and maximum on both backends, bit for bit: NaN if
// either operand is NaN, -0 below +0 whatever the operands' order; clamp is their composition.
TEST_F(RandomGraphTest, FloatMinMaxOrderSignedZerosAndPropagateNaN) {
  for (const kf_dtype_t dtype : {KF_DTYPE_FLOAT32, KF_DTYPE_FLOAT64, KF_DTYPE_BFLOAT16}) {
    SCOPED_TRACE(row_test::dtype_name(dtype));
    fusion_test::GraphHandle g(ctx());
    Builder b{g};
    const int32_t x = b.tensor(dtype, 1);
    const int32_t y = b.tensor(dtype, 1);
    b.output(b.binary(KF_BINARY_MIN, x, y));
    b.output(b.binary(KF_BINARY_MAX, x, y));
    b.output(b.binary(KF_BINARY_MAX, x, b.scalar(0.0)));  // a launch value operand
    b.output(b.clamp(x, y, b.scalar(1.5)));
    fusion_test::KernelHandle k = fusion_test::compile(g);
    ASSERT_NE(k.k, nullptr);
    const double kValues[] = {0.0, -0.0, 1.0, -1.0, 1.5, 2.0, -2.0, INFINITY, -INFINITY, NAN};
    const size_t m = sizeof kValues / sizeof kValues[0];
    std::vector<Num> xs, ys;
    for (size_t i = 0; i < m * m; ++i) {
      xs.push_back(Num{kValues[i / m], 0});
      ys.push_back(Num{kValues[i % m], 0});
    }
    const int64_t n = static_cast<int64_t>(xs.size());
    std::mt19937_64 rng(5);
    DeviceTensor tx = fusion_test::make_tensor(ctx(), dtype, {n}, false, rng);
    DeviceTensor ty = fusion_test::make_tensor(ctx(), dtype, {n}, true, rng);
    fusion_test::upload(tx, xs);
    fusion_test::upload(ty, ys);
    std::vector<DeviceTensor> outs;
    std::vector<kf_tensor_t*> handles;
    for (int o = 0; o < 4; ++o) {
      outs.push_back(fusion_test::make_tensor(ctx(), dtype, {n}, o == 3, rng));
      fusion_test::poison(outs.back());
      handles.push_back(outs.back().handle());
    }
    KF_ASSERT_OK(fusion_test::launch(k, 1, {tx.handle(), ty.handle()}, handles));
    for (int o = 0; o < 4; ++o) {
      const std::vector<Num> got = fusion_test::download(outs[o], "output " + std::to_string(o));
      for (size_t i = 0; i < got.size(); ++i) {
        const double a = xs[i].f, c = ys[i].f;
        const double want = o == 0   ? ieee_minimum(a, c)
                            : o == 1 ? ieee_maximum(a, c)
                            : o == 2 ? ieee_maximum(a, 0.0)
                                     : ieee_minimum(ieee_maximum(a, c), 1.5);
        const double value = got[i].f;
        const bool same = (std::isnan(want) && std::isnan(value)) ||
                          (value == want && std::signbit(value) == std::signbit(want));
        EXPECT_TRUE(same) << "output " << o << " (" << a << ", " << c << "): got " << value
                          << ", want " << want;
      }
    }
    if (HasFailure()) return;
  }
}

}  // namespace
