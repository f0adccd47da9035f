"""The fusion engine (include/kernel_fusion/graph.h): build a graph of operations, compile it into
one kernel (NVRTC on CUDA, the CPU executor on the CPU), launch it on many items at once.

    g = kf.Graph(ctx)
    x = g.input("float32", rank=2)
    y = g.activation("gelu", g.mul(x, g.scalar(0.5)))
    g.output(y)
    k = g.compile()                      # cached by structure: values never recompile
    k([xt], [out])                       # or k([[x0], [x1]], [[o0], [o1]]) for two items

Node ids are ints, valid in their graph only; builder methods take node ids (wrap a number with
scalar() or constant()).
"""

import ctypes

from . import _capi
from . import _Owned, _check, _dtype_name, _h, _lib, _new_handle


def _pick(table, key, what):
    try:
        return table[key.lower() if isinstance(key, str) else key]
    except (KeyError, TypeError):
        names = ", ".join(str(k) for k in table if k is not None)
        raise ValueError(f"{what} must be one of {names}, not {key!r}") from None


# Channels of a colour conversion's result, by conversion (graph.h).
_CONVERTED_CHANNELS = {0: 3, 1: 4, 2: 1, 3: 1, 4: 3, 5: 4, 6: 3, 7: 4}


class Graph(_Owned):
    """A graph under construction in a Context (one thread at a time)."""

    _kind, _destroy = "graph", "kf_graph_destroy"

    def __init__(self, context):
        self._open(context, _lib.kf_graph_create, context.handle)
        # Each node's channel count, as the library derives it: normalize() passes C arrays of
        # one value a channel, whose length the C call cannot check.
        self._channels = {}
        self._nv12 = set()

    def _node(self, fn, *args, channels=None):
        node = ctypes.c_int32()
        _check(fn(self.handle, *args, ctypes.byref(node)))
        if channels is not None:
            self._channels[node.value] = channels
        return node.value

    def _widest(self, *nodes):
        known = [self._channels.get(n) for n in nodes]
        return None if None in known else max(known)

    # ---- inputs and constants

    def input(self, dtype="float32", rank=1, kind="tensor", channels=1):
        """Declares an input (bound at launch in declaration order): a tensor of `rank` dims, an
        HWC image (kind="image", rank 3, 1/3/4 channels) or an NV12 frame (kind="nv12", uint8)."""
        kind = _pick(_capi.INPUT_KINDS, kind, "kind")
        desc = _capi.GraphInputDesc(ctypes.sizeof(_capi.GraphInputDesc), kind,
                                    _capi.DTYPES[_dtype_name(dtype)][0], rank, channels)
        image = kind == _capi.INPUT_KINDS["image"]
        node = self._node(_lib.kf_graph_input, ctypes.byref(desc),
                          channels=int(channels) if image else 1)
        if kind == _capi.INPUT_KINDS["nv12"]:
            self._nv12.add(node)
        return node

    def image(self, dtype="uint8", channels=3):
        """An HWC image input: a tensor [H, W, channels]."""
        return self.input(dtype, 3, "image", channels)

    def nv12(self):
        """An NV12 frame input: a uint8 tensor [H * 3 / 2, W]; reads give RGB."""
        return self.input("uint8", 2, "nv12")

    def scalar(self, value):
        """A scalar value (weakly typed: it takes the other operand's dtype)."""
        return self._node(_lib.kf_graph_scalar, float(value), channels=1)

    def constant(self, values):
        """A per-channel constant of 1..4 values."""
        values = [float(v) for v in values]
        array = (ctypes.c_double * len(values))(*values)
        return self._node(_lib.kf_graph_constant, len(values), array, channels=len(values))

    # ---- elementwise

    def unary(self, op, x):
        """op in neg, abs, exp, log, sqrt, rsqrt, square."""
        return self._node(_lib.kf_graph_unary, _pick(_capi.UNARY_OPS, op, "op"), x,
                          channels=self._channels.get(x))

    def activation(self, act, x):
        """The fixed ops' activations: none, relu, gelu, gelu_tanh, silu, tanh, sigmoid."""
        return self._node(_lib.kf_graph_activation, _pick(_capi.ACTIVATIONS, act, "activation"), x,
                          channels=self._channels.get(x))

    def binary(self, op, a, b):
        """op in add, sub, mul, div, min, max, pow, eq, ne, lt, le, gt, ge (NumPy broadcasting;
        comparisons give uint8 0 or 1)."""
        return self._node(_lib.kf_graph_binary, _pick(_capi.BINARY_OPS, op, "op"), a, b,
                          channels=self._widest(a, b))

    def add(self, a, b):
        return self.binary("add", a, b)

    def sub(self, a, b):
        return self.binary("sub", a, b)

    def mul(self, a, b):
        return self.binary("mul", a, b)

    def div(self, a, b):
        return self.binary("div", a, b)

    def clamp(self, x, lo, hi):
        return self._node(_lib.kf_graph_clamp, x, lo, hi, channels=self._widest(x, lo, hi))

    def where(self, cond, a, b):
        return self._node(_lib.kf_graph_where, cond, a, b, channels=self._widest(cond, a, b))

    def cast(self, x, dtype, mode="wrap"):
        """mode: wrap, saturate or saturate_round (the usual way to write uint8 pixels)."""
        return self._node(_lib.kf_graph_cast, x, _capi.DTYPES[_dtype_name(dtype)][0],
                          _pick(_capi.CAST_MODES, mode, "mode"), channels=self._channels.get(x))

    # ---- images

    def read_image(self, image, *, crop=False, interpolation=None, keep_aspect_ratio=False,
                   border="constant", border_value=0.0, color_standard="bt601", full_range=False):
        """Reads an image input in output space: crop (each launch item gives a rectangle),
        resize to the output ("nearest", "bilinear"), letterbox, border rule."""
        desc = _capi.ImageReadDesc(
            ctypes.sizeof(_capi.ImageReadDesc), int(bool(crop)),
            _pick(_capi.INTERPOLATIONS, interpolation, "interpolation"),
            int(bool(keep_aspect_ratio)), _pick(_capi.BORDERS, border, "border"),
            float(border_value), _pick(_capi.COLOR_STANDARDS, color_standard, "color_standard"),
            int(bool(full_range)))
        channels = 3 if image in self._nv12 else self._channels.get(image)
        return self._node(_lib.kf_graph_read_image, image, ctypes.byref(desc), channels=channels)

    def color_convert(self, x, conversion):
        """rgb_to_bgr, rgba_to_bgra, rgb_to_gray, bgr_to_gray, rgba_to_rgb, rgb_to_rgba,
        rgba_to_bgr, bgr_to_rgba."""
        conversion = _pick(_capi.COLOR_CONVERSIONS, conversion, "conversion")
        return self._node(_lib.kf_graph_color_convert, x, conversion,
                          channels=_CONVERTED_CHANNELS[conversion])

    def normalize(self, x, mean, std, scale=1.0):
        """(x * scale - mean[c]) / std[c] per channel: one mean and one std for each of x's
        channels."""
        mean, std = [float(v) for v in mean], [float(v) for v in std]
        if len(mean) != len(std):
            raise ValueError(f"{len(mean)} means for {len(std)} standard deviations")
        channels = self._channels.get(x)
        if channels is not None and len(mean) != channels:
            raise ValueError(f"node {x} has {channels} channel{'s' if channels > 1 else ''}; "
                             f"normalize takes one mean and one std for each, not {len(mean)}")
        return self._node(_lib.kf_graph_normalize, x, float(scale),
                          (ctypes.c_double * len(mean))(*mean), (ctypes.c_double * len(std))(*std),
                          channels=channels)

    # ---- outputs and compilation

    def output(self, node, layout="as_is", batched=False):
        """Marks a node as an output (bound at launch in marking order); returns its position.
        Image graphs: layout "planar" writes CHW, batched one [N, ...] tensor for all items."""
        desc = _capi.GraphOutputDesc(ctypes.sizeof(_capi.GraphOutputDesc),
                                     _pick(_capi.OUTPUT_LAYOUTS, layout, "layout"),
                                     int(bool(batched)))
        return self._node(_lib.kf_graph_output, node, ctypes.byref(desc))

    @staticmethod
    def _options(max_items, disk_cache=True, memory_cache=True):
        flags = (0 if disk_cache else _capi.COMPILE_NO_DISK_CACHE) | \
                (0 if memory_cache else _capi.COMPILE_NO_MEMORY_CACHE)
        return _capi.CompileOptions(ctypes.sizeof(_capi.CompileOptions), max_items, flags)

    def source(self, max_items=1):
        """The CUDA C++ generated for the graph (on any context, with no GPU)."""
        options = self._options(max_items)
        return _read_string(lambda buf, cap, n: _lib.kf_graph_get_source(
            self.handle, ctypes.byref(options), buf, cap, n))

    def compile(self, max_items=1, *, disk_cache=True, memory_cache=True):
        """The graph as one kernel for the context's device, able to run `max_items` items a
        launch; later changes to the graph do not reach it."""
        options = self._options(max_items, disk_cache, memory_cache)
        handle = _new_handle(_lib.kf_graph_compile, self.handle, ctypes.byref(options))
        kernel = FusedKernel.__new__(FusedKernel)
        kernel.context, kernel._handle = self.context, handle
        return kernel


def _read_string(call):
    length = ctypes.c_size_t()
    _check(call(None, 0, ctypes.byref(length)))
    buffer = ctypes.create_string_buffer(length.value)
    _check(call(buffer, length.value, ctypes.byref(length)))
    return buffer.value.decode("utf-8")


def _items(tensors):
    """A list of items, each a list of tensors, from one item's list or a list of items."""
    tensors = list(tensors)
    if tensors and isinstance(tensors[0], (list, tuple)):
        return [list(item) for item in tensors]
    return [tensors]


class FusedKernel(_Owned):
    """A compiled graph: immutable, launchable from many threads at once."""

    _kind, _destroy = "fused kernel", "kf_fused_kernel_destroy"

    @property
    def info(self):
        """origin (compiled, memory_cache, disk_cache), compile_ms, n_inputs, n_outputs,
        max_items, structure_hash."""
        info = _capi.FusedKernelInfo()
        info.struct_size = ctypes.sizeof(info)
        _check(_lib.kf_fused_kernel_get_info(self.handle, ctypes.byref(info)))
        out = {name: getattr(info, name) for name, _ in info._fields_ if name != "struct_size"}
        out["origin"] = _capi.KERNEL_ORIGINS.get(info.origin, info.origin)
        return out

    @property
    def source(self):
        """The generated CUDA source ("" on a CPU context)."""
        return _read_string(lambda buf, cap, n: _lib.kf_fused_kernel_get_source(
            self.handle, buf, cap, n))

    def __call__(self, inputs, outputs, *, crops=None, values=None, stream=None):
        """Runs the kernel: `inputs` and `outputs` are one item's tensors, or a list of items'
        lists (n_items = len). crops: an (x, y, width, height) per item where the graph's read
        crops. values: {(node, index): value} overrides for this launch (a scalar's index is 0;
        see kf_fused_value_t). Asynchronous on CUDA, ordered on `stream`. Returns `outputs`."""
        ins, outs = _items(inputs), _items(outputs)
        if len(ins) != len(outs):
            raise ValueError(f"{len(ins)} items of inputs for {len(outs)} items of outputs")
        stream = self.context._stream(stream)
        flat_in = [_h(t, "input") for item in ins for t in item]
        flat_out = [_h(t, "output") for item in outs for t in item]
        args = _capi.LaunchArgs()
        args.struct_size = ctypes.sizeof(args)
        args.n_items = len(ins)
        in_array = (ctypes.c_void_p * max(len(flat_in), 1))(*flat_in)
        out_array = (ctypes.c_void_p * max(len(flat_out), 1))(*flat_out)
        args.inputs = ctypes.cast(in_array, ctypes.POINTER(ctypes.c_void_p))
        args.outputs = ctypes.cast(out_array, ctypes.POINTER(ctypes.c_void_p))
        if crops is not None:
            crops = [tuple(int(v) for v in c) for c in crops]
            if len(crops) != len(ins):
                raise ValueError(f"{len(crops)} crops for {len(ins)} items")
            rects = (_capi.Rect * len(crops))(*[_capi.Rect(*c) for c in crops])
            args.crops = ctypes.cast(rects, ctypes.POINTER(_capi.Rect))
        if values:
            entries = [_capi.FusedValue(node, index, float(v)) for (node, index), v in values.items()]
            value_array = (_capi.FusedValue * len(entries))(*entries)
            args.values = ctypes.cast(value_array, ctypes.POINTER(_capi.FusedValue))
            args.n_values = len(entries)
        _check(_lib.kf_fused_kernel_launch(self.handle, ctypes.byref(args), stream.handle))
        for item in outs:
            for t in item:
                t._writer = stream
        return outputs

    launch = __call__
