"""ctypes declarations of the C ABI (include/kernel_fusion/*.h) and the library loader.

Only what the Python frontend calls is declared. Struct layouts mirror the public headers; the
library checks each option struct's struct_size, so a mismatch is refused rather than misread.
"""

import ctypes
import ctypes.util
import os

# ---- enums (values fixed by include/kernel_fusion/types.h) ----------------------------------

SUCCESS = 0
ERROR_NAMES = {
    1: "INVALID_ARGUMENT",
    2: "INVALID_HANDLE",
    3: "OUT_OF_MEMORY",
    4: "NOT_SUPPORTED",
    5: "SHAPE_MISMATCH",
    6: "DTYPE_MISMATCH",
    7: "DEVICE_MISMATCH",
    8: "NO_DEVICE",
    9: "CUDA",
    10: "VERSION_MISMATCH",
    11: "INTERNAL",
    12: "COMPILE",
}

DEVICE_CPU = 0
DEVICE_CUDA = 1

DTYPES = {  # name -> (kf_dtype_t, bytes)
    "float32": (0, 4),
    "float16": (1, 2),
    "bfloat16": (2, 2),
    "float64": (3, 8),
    "int8": (4, 1),
    "uint8": (5, 1),
    "int32": (6, 4),
    "int64": (7, 8),
}
DTYPE_NAMES = {code: name for name, (code, _) in DTYPES.items()}

ACTIVATIONS = {
    None: 0,
    "none": 0,
    "relu": 1,
    "gelu": 2,
    "gelu_tanh": 3,
    "silu": 4,
    "tanh": 5,
    "sigmoid": 6,
}

REDUCE_OPS = {
    "sum": 0,
    "mean": 1,
    "max": 2,
    "min": 3,
    "sum_squares": 4,
    "mean_abs": 5,
    "l2_norm": 6,
}

LAYOUTS = {"nchw": 0, "nhwc": 1}

MAX_DIMS = 8
STREAM_NON_BLOCKING = 1

# ---- structs ----------------------------------------------------------------------------------


class TensorDesc(ctypes.Structure):
    _fields_ = [
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
        ("dtype", ctypes.c_int),
    ]


class ContextConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device_type", ctypes.c_int),
        ("device_id", ctypes.c_int32),
        ("memory_limit_bytes", ctypes.c_uint64),
        ("cpu_threads", ctypes.c_int32),
    ]


class StreamConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("priority", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


class DeviceProperties(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("name", ctypes.c_char * 256),
        ("device_type", ctypes.c_int),
        ("device_id", ctypes.c_int32),
        ("compute_capability_major", ctypes.c_int32),
        ("compute_capability_minor", ctypes.c_int32),
        ("multiprocessor_count", ctypes.c_int32),
        ("total_memory_bytes", ctypes.c_uint64),
        ("l2_cache_bytes", ctypes.c_uint64),
        ("stream_priority_least", ctypes.c_int32),
        ("stream_priority_greatest", ctypes.c_int32),
    ]


class MemoryStats(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("in_use_bytes", ctypes.c_uint64),
        ("reserved_bytes", ctypes.c_uint64),
        ("peak_in_use_bytes", ctypes.c_uint64),
        ("limit_bytes", ctypes.c_uint64),
        ("allocation_count", ctypes.c_uint64),
    ]


# ---- the fusion engine (include/kernel_fusion/graph.h) -----------------------------------------

INPUT_KINDS = {"tensor": 0, "image": 1, "nv12": 2}
UNARY_OPS = {"neg": 0, "abs": 1, "exp": 2, "log": 3, "sqrt": 4, "rsqrt": 5, "square": 6}
BINARY_OPS = {"add": 0, "sub": 1, "mul": 2, "div": 3, "min": 4, "max": 5, "pow": 6, "eq": 7,
              "ne": 8, "lt": 9, "le": 10, "gt": 11, "ge": 12}
CAST_MODES = {"wrap": 0, "saturate": 1, "saturate_round": 2}
INTERPOLATIONS = {None: 0, "none": 0, "nearest": 1, "bilinear": 2}
BORDERS = {"constant": 0, "replicate": 1, "reflect": 2}
COLOR_STANDARDS = {"bt601": 0, "bt709": 1}
COLOR_CONVERSIONS = {"rgb_to_bgr": 0, "rgba_to_bgra": 1, "rgb_to_gray": 2, "bgr_to_gray": 3,
                     "rgba_to_rgb": 4, "rgb_to_rgba": 5, "rgba_to_bgr": 6, "bgr_to_rgba": 7}
OUTPUT_LAYOUTS = {"as_is": 0, "planar": 1}
KERNEL_ORIGINS = {0: "compiled", 1: "memory_cache", 2: "disk_cache"}
COMPILE_NO_DISK_CACHE = 1
COMPILE_NO_MEMORY_CACHE = 2


class GraphInputDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("kind", ctypes.c_int), ("dtype", ctypes.c_int),
                ("rank", ctypes.c_int32), ("channels", ctypes.c_int32)]


class ImageReadDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("crop", ctypes.c_int32),
                ("interpolation", ctypes.c_int), ("keep_aspect_ratio", ctypes.c_int32),
                ("border", ctypes.c_int), ("border_value", ctypes.c_double),
                ("color_standard", ctypes.c_int), ("full_range", ctypes.c_int32)]


class GraphOutputDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("layout", ctypes.c_int),
                ("batched", ctypes.c_int32)]


class CompileOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("max_items", ctypes.c_int32),
                ("flags", ctypes.c_uint32)]


class FusedKernelInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("origin", ctypes.c_int),
                ("compile_ms", ctypes.c_double), ("n_inputs", ctypes.c_int32),
                ("n_outputs", ctypes.c_int32), ("max_items", ctypes.c_int32),
                ("structure_hash", ctypes.c_uint64)]


class FusedValue(ctypes.Structure):
    _fields_ = [("node", ctypes.c_int32), ("index", ctypes.c_int32), ("value", ctypes.c_double)]


class Rect(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int32), ("y", ctypes.c_int32), ("width", ctypes.c_int32),
                ("height", ctypes.c_int32)]


class LaunchArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("n_items", ctypes.c_int32),
                ("inputs", ctypes.POINTER(ctypes.c_void_p)),
                ("outputs", ctypes.POINTER(ctypes.c_void_p)), ("crops", ctypes.POINTER(Rect)),
                ("values", ctypes.POINTER(FusedValue)), ("n_values", ctypes.c_size_t)]


# ---- the library ------------------------------------------------------------------------------

_P = ctypes.c_void_p  # every handle is an opaque pointer
_R = ctypes.c_int  # kf_result_t
_I32 = ctypes.c_int32
_I64 = ctypes.c_int64
_U64 = ctypes.c_uint64
_D = ctypes.c_double
_PP = ctypes.POINTER(ctypes.c_void_p)

# name: (restype, argtypes)
_PROTOTYPES = {
    "kf_result_string": (ctypes.c_char_p, [_R]),
    "kf_get_last_error_message": (ctypes.c_char_p, []),
    "kf_get_version": (ctypes.c_uint32, []),
    "kf_get_device_count": (_R, [ctypes.c_int, ctypes.POINTER(_I32)]),
    "kf_get_device_properties": (_R, [ctypes.c_int, _I32, ctypes.POINTER(DeviceProperties)]),
    "kf_context_create": (_R, [ctypes.POINTER(ContextConfig), _PP]),
    "kf_context_destroy": (_R, [_P]),
    "kf_context_get_device": (_R, [_P, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_I32)]),
    "kf_context_synchronize": (_R, [_P]),
    "kf_context_get_stream_priority_range": (_R, [_P, ctypes.POINTER(_I32), ctypes.POINTER(_I32)]),
    "kf_context_get_memory_stats": (_R, [_P, ctypes.POINTER(MemoryStats)]),
    "kf_context_reset_peak_memory": (_R, [_P]),
    "kf_context_trim_memory": (_R, [_P, _U64]),
    "kf_stream_create": (_R, [_P, ctypes.POINTER(StreamConfig), _PP]),
    "kf_stream_wrap_native": (_R, [_P, _P, _PP]),
    "kf_stream_get_native": (_R, [_P, _PP]),
    "kf_stream_get_priority": (_R, [_P, ctypes.POINTER(_I32)]),
    "kf_stream_destroy": (_R, [_P]),
    "kf_stream_synchronize": (_R, [_P]),
    "kf_stream_wait_event": (_R, [_P, _P]),
    "kf_event_create": (_R, [_P, _PP]),
    "kf_event_record": (_R, [_P, _P]),
    "kf_event_synchronize": (_R, [_P]),
    "kf_event_query": (_R, [_P, ctypes.POINTER(_I32)]),
    "kf_event_elapsed_ms": (_R, [_P, _P, ctypes.POINTER(ctypes.c_float)]),
    "kf_event_destroy": (_R, [_P]),
    "kf_tensor_create_async": (_R, [_P, ctypes.POINTER(TensorDesc), _P, _PP]),
    "kf_tensor_create_view": (_R, [_P, ctypes.POINTER(TensorDesc), _I64, _PP]),
    "kf_tensor_destroy": (_R, [_P]),
    "kf_tensor_get_desc": (_R, [_P, ctypes.POINTER(TensorDesc)]),
    "kf_tensor_get_data": (_R, [_P, _PP]),
    "kf_tensor_get_device": (_R, [_P, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_I32)]),
    "kf_tensor_copy_from_host": (_R, [_P, _P, ctypes.c_size_t, _P]),
    "kf_tensor_copy_to_host": (_R, [_P, _P, ctypes.c_size_t, _P]),
    "kf_tensor_from_dlpack": (_R, [_P, _P, _PP]),
    "kf_tensor_from_dlpack_legacy": (_R, [_P, _P, _PP]),
    "kf_tensor_from_dlpack_async": (_R, [_P, _P, _P, _PP]),
    "kf_tensor_from_dlpack_legacy_async": (_R, [_P, _P, _P, _PP]),
    "kf_tensor_to_dlpack": (_R, [_P, _PP]),
    "kf_tensor_to_dlpack_legacy": (_R, [_P, _PP]),
    "kf_fused_elementwise_add_activation": (_R, [_P, _P, _P, _P, ctypes.c_int, _P]),
    "kf_fused_elementwise_mul_activation": (_R, [_P, _P, _P, _P, ctypes.c_int, _P]),
    "kf_fused_bias_activation": (_R, [_P, _P, _P, _P, ctypes.c_int, _P]),
    "kf_fused_gelu_dropout": (_R, [_P, _P, _P, _P, _D, _I32, _U64, _U64, _P]),
    "kf_fused_layer_norm_activation": (_R, [_P, _P, _P, _P, _P, _P, _P, _I32, _D, ctypes.c_int, _P]),
    "kf_fused_rms_norm_activation": (_R, [_P, _P, _P, _P, _P, _P, _D, ctypes.c_int, _P]),
    "kf_fused_softmax": (_R, [_P, _P, _P, _P, _D, _I32, _P]),
    "kf_log_softmax": (_R, [_P, _P, _P, _P, _D, _I32, _P]),
    "kf_fused_batch_norm_activation": (
        _R,
        [_P, _P, _P, _P, _P, _P, _P, _I32, _D, _D, ctypes.c_int, ctypes.c_int, _P],
    ),
    "kf_reduce": (_R, [_P, _P, _P, ctypes.c_int, ctypes.POINTER(_I32), _I32, _I32, _P]),
    "kf_graph_create": (_R, [_P, _PP]),
    "kf_graph_destroy": (_R, [_P]),
    "kf_graph_input": (_R, [_P, ctypes.POINTER(GraphInputDesc), ctypes.POINTER(_I32)]),
    "kf_graph_scalar": (_R, [_P, _D, ctypes.POINTER(_I32)]),
    "kf_graph_constant": (_R, [_P, _I32, ctypes.POINTER(_D), ctypes.POINTER(_I32)]),
    "kf_graph_unary": (_R, [_P, ctypes.c_int, _I32, ctypes.POINTER(_I32)]),
    "kf_graph_activation": (_R, [_P, ctypes.c_int, _I32, ctypes.POINTER(_I32)]),
    "kf_graph_binary": (_R, [_P, ctypes.c_int, _I32, _I32, ctypes.POINTER(_I32)]),
    "kf_graph_clamp": (_R, [_P, _I32, _I32, _I32, ctypes.POINTER(_I32)]),
    "kf_graph_where": (_R, [_P, _I32, _I32, _I32, ctypes.POINTER(_I32)]),
    "kf_graph_cast": (_R, [_P, _I32, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_I32)]),
    "kf_graph_read_image": (_R, [_P, _I32, ctypes.POINTER(ImageReadDesc), ctypes.POINTER(_I32)]),
    "kf_graph_color_convert": (_R, [_P, _I32, ctypes.c_int, ctypes.POINTER(_I32)]),
    "kf_graph_normalize": (_R, [_P, _I32, _D, ctypes.POINTER(_D), ctypes.POINTER(_D),
                                ctypes.POINTER(_I32)]),
    "kf_graph_output": (_R, [_P, _I32, ctypes.POINTER(GraphOutputDesc), ctypes.POINTER(_I32)]),
    "kf_graph_compile": (_R, [_P, ctypes.POINTER(CompileOptions), _PP]),
    "kf_graph_get_source": (_R, [_P, ctypes.POINTER(CompileOptions), ctypes.c_char_p,
                                 ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "kf_fused_kernel_destroy": (_R, [_P]),
    "kf_fused_kernel_get_info": (_R, [_P, ctypes.POINTER(FusedKernelInfo)]),
    "kf_fused_kernel_get_source": (_R, [_P, ctypes.c_char_p, ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_size_t)]),
    "kf_fused_kernel_launch": (_R, [_P, ctypes.POINTER(LaunchArgs), _P]),
}

# The oldest library this frontend works with (kf_get_version: major * 10000 + minor * 100 + patch):
# 0.3.0, the first with every function above (the DLPack imports with a home stream). The major
# version must match (SONAME libkernel_fusion.so.0).
MIN_VERSION = 300
MAJOR = 0


def _installed_library_dir():
    """The library directory of the install tree that `cmake --install` put this package in, or
    None. The install writes it into the package (_installed.py): relative to the package's real
    directory (a link to the package from elsewhere still finds it), or absolute."""
    try:
        from ._installed import LIBRARY_DIR
    except ImportError:  # the source tree, or a pip install
        return None
    here = os.path.dirname(os.path.realpath(__file__))
    return os.path.normpath(os.path.join(here, LIBRARY_DIR))


def _candidates():
    explicit = os.environ.get("KF_LIBRARY")
    if explicit:
        return [explicit]
    names = ["libkernel_fusion.so.0", "libkernel_fusion.so"]
    found = []
    for directory in (os.path.dirname(os.path.abspath(__file__)), _installed_library_dir()):
        if directory:  # beside the package, then the install tree's library directory
            found += [os.path.join(directory, n) for n in names
                      if os.path.exists(os.path.join(directory, n))]
    system = ctypes.util.find_library("kernel_fusion")
    if system:
        found.append(system)
    return found + names  # last: the dynamic loader's own search path


def load():
    """Loads libkernel_fusion (KF_LIBRARY names it; else beside this package, else the install
    tree's library directory where `cmake --install` put the package, else the loader's search
    path) and declares the prototypes. Raises OSError naming every place tried."""
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise OSError(
            "libkernel_fusion could not be loaded (set KF_LIBRARY to its path): "
            + "; ".join(errors)
        )
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)  # AttributeError names a symbol the library does not export
        fn.restype = restype
        fn.argtypes = argtypes
    version = lib.kf_get_version()
    if version // 10000 != MAJOR or version < MIN_VERSION:
        raise OSError(
            f"libkernel_fusion {version // 10000}.{version // 100 % 100}.{version % 100} at "
            f"{path} is not served by this frontend (needs {MAJOR}.x, at least "
            f"{MIN_VERSION // 10000}.{MIN_VERSION // 100 % 100}.{MIN_VERSION % 100})"
        )
    return lib, path
