"""Python frontend of libkernel_fusion: ctypes over the C ABI, DLPack for zero-copy exchange.

    import numpy as np, kernel_fusion as kf
    ctx = kf.Context("cpu")                    # or "cuda", "cuda:1"
    x = ctx.from_dlpack(np.random.rand(4, 8).astype(np.float32))   # borrows, no copy
    y = kf.softmax(x, scale=0.5)               # a new tensor in x's context
    np.from_dlpack(y)                          # borrows y's memory

Every tensor belongs to one Context; ops take kernel_fusion Tensors (import the arrays of any DLPack
producer -- NumPy, PyTorch, CuPy ... -- with Context.from_dlpack) and return them. Where `out` is
not given, an op allocates it from the context's pool. Work is ordered on a Stream: each Context
has a default one (Context.default_stream), and Context.wrap_stream borrows another runtime's
(`torch.cuda.current_stream().cuda_stream`), so no synchronisation is added. Graph is the fusion
engine: compose operations, compile them into one kernel, launch it on many items. A failing call
raises an Error subclass carrying the library's message.
"""

import ctypes
import operator

from . import _capi, _dlpack

__all__ = [
    "Error", "InvalidArgumentError", "InvalidHandleError", "OutOfMemoryError", "NotSupportedError",
    "ShapeMismatchError", "DtypeMismatchError", "DeviceMismatchError", "NoDeviceError",
    "CudaError", "VersionMismatchError", "InternalError", "CompileError",
    "Context", "Stream", "Event", "Tensor", "version", "library_path", "device_count",
    "device_properties", "add_activation", "mul_activation", "bias_activation", "gelu_dropout",
    "layer_norm", "rms_norm", "softmax", "log_softmax", "batch_norm", "reduce", "Graph",
    "FusedKernel",
]

_lib, _path = _capi.load()

# ---- errors -----------------------------------------------------------------------------------


class Error(RuntimeError):
    """A failed library call: `code` (kf_result_t), `code_name` and the library's message."""

    def __init__(self, code, message):
        self.code = code
        self.code_name = "KF_ERROR_" + _capi.ERROR_NAMES.get(code, str(code))
        self.message = message
        super().__init__(f"{message} ({self.code_name})" if message else self.code_name)


class InvalidArgumentError(Error, ValueError): pass
class InvalidHandleError(Error, ValueError): pass
class OutOfMemoryError(Error, MemoryError): pass
class NotSupportedError(Error): pass
class ShapeMismatchError(Error, ValueError): pass
class DtypeMismatchError(Error, TypeError): pass
class DeviceMismatchError(Error, ValueError): pass
class NoDeviceError(Error): pass
class CudaError(Error): pass
class VersionMismatchError(Error): pass
class InternalError(Error): pass
class CompileError(Error): pass


_ERRORS = {
    1: InvalidArgumentError, 2: InvalidHandleError, 3: OutOfMemoryError, 4: NotSupportedError,
    5: ShapeMismatchError, 6: DtypeMismatchError, 7: DeviceMismatchError, 8: NoDeviceError,
    9: CudaError, 10: VersionMismatchError, 11: InternalError, 12: CompileError,
}


def _check(result):
    if result != _capi.SUCCESS:
        message = _lib.kf_get_last_error_message()
        raise _ERRORS.get(result, Error)(result, message.decode("utf-8", "replace") if message else "")


def _new_handle(fn, *args):
    out = ctypes.c_void_p()
    _check(fn(*args, ctypes.byref(out)))
    return out.value


# ---- library and devices ----------------------------------------------------------------------


def version():
    """(major, minor, patch) of the loaded library."""
    v = _lib.kf_get_version()
    return v // 10000, v // 100 % 100, v % 100


def library_path():
    """The file the library was loaded from."""
    return _path


def _device_kind(kind):
    if kind in ("cpu", _capi.DEVICE_CPU):
        return _capi.DEVICE_CPU
    if kind in ("cuda", _capi.DEVICE_CUDA):
        return _capi.DEVICE_CUDA
    raise ValueError(f"device kind must be 'cpu' or 'cuda', not {kind!r}")


def device_count(kind="cuda"):
    """Usable devices of a kind: 1 for 'cpu'; the CUDA devices (0 without a driver or GPU)."""
    count = ctypes.c_int32()
    _check(_lib.kf_get_device_count(_device_kind(kind), ctypes.byref(count)))
    return count.value


def device_properties(kind="cuda", device_id=0):
    """A dict of the device's properties (name, compute capability, SMs, memory, L2, priorities)."""
    props = _capi.DeviceProperties()
    props.struct_size = ctypes.sizeof(props)
    _check(_lib.kf_get_device_properties(_device_kind(kind), device_id, ctypes.byref(props)))
    out = {name: getattr(props, name) for name, _ in props._fields_ if name != "struct_size"}
    out["name"] = props.name.decode("utf-8", "replace")
    out["device_type"] = "cuda" if props.device_type == _capi.DEVICE_CUDA else "cpu"
    return out


def _dtype_name(dtype):
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type) and dtype.__module__ == "numpy":  # np.float32 and its kin
        import numpy

        name = numpy.dtype(dtype).name
    else:  # numpy, torch, cupy and jax dtypes all name themselves
        name = getattr(dtype, "name", None) or str(dtype)
    name = name.replace("torch.", "")
    name = {"f32": "float32", "float": "float32", "f16": "float16", "half": "float16",
            "bf16": "bfloat16", "f64": "float64", "double": "float64"}.get(name, name)
    if name not in _capi.DTYPES:
        raise TypeError(f"dtype {dtype!r} is not one of {', '.join(_capi.DTYPES)}")
    return name


def _integer(value, what, lo, hi):
    """value as a Python int in [lo, hi]; TypeError for non-integers (1.5, "1"), ValueError out of
    range, instead of ctypes' silent wraparound."""
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {value!r}") from None
    if not lo <= n <= hi:
        raise ValueError(f"{what} must be in [{lo}, {hi}], not {n}")
    return n


_INT32 = (-(2**31), 2**31 - 1)
_UINT64 = (0, 2**64 - 1)


def _desc(shape, dtype, strides=None):
    shape = tuple(int(d) for d in shape)
    if len(shape) > _capi.MAX_DIMS:
        raise ValueError(f"a tensor has at most {_capi.MAX_DIMS} dims, not {len(shape)}")
    d = _capi.TensorDesc()
    d.ndim = len(shape)
    for i, extent in enumerate(shape):
        d.shape[i] = extent
    if strides is not None:
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise ValueError(f"{len(strides)} strides for {len(shape)} dims")
        for i, stride in enumerate(strides):
            d.strides[i] = stride
    d.dtype = _capi.DTYPES[_dtype_name(dtype)][0]
    return d


# ---- contexts, streams, events ----------------------------------------------------------------


class _Owned:
    """A library handle owned by a Python object: destroyed by close(), a `with` block's end or the
    finalizer. The handles of a closed context went with it and are not destroyed again."""

    _kind = "handle"
    _destroy = ""  # name of the kf_*_destroy function

    def _open(self, context, create, *args):
        """Creates the handle: create(*args, &out). _handle is set first, so that the finalizer of
        an object whose creation failed has nothing to destroy."""
        self.context = context
        self._handle = None
        self._handle = _new_handle(create, *args)

    @property
    def handle(self):
        if self._handle is None:
            raise InvalidHandleError(2, f"the {self._kind} was closed")
        return self._handle

    def close(self):
        if self._handle is not None:
            handle, self._handle = self._handle, None
            if self.context._handle is not None:
                _check(getattr(_lib, self._destroy)(handle))
        _dlpack.release_dropped()  # the tensors exported to consumers that have let them go

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Context(_Owned):
    """A device (the CPU or one CUDA GPU), its memory pool and streams.

    device: "cpu", "cuda" or "cuda:N" (or device_id=N). memory_limit: bytes the pool may reserve
    (0: no limit). cpu_threads: workers of the CPU backend (0: one per core). Usable as a context
    manager; close() (or leaving the `with`) destroys it, after which its tensors, streams and
    events are invalid handles.
    """

    _kind = "context"

    def __init__(self, device="cpu", device_id=0, memory_limit=0, cpu_threads=0):
        kind = device
        if isinstance(device, str) and device.startswith("cuda:"):
            kind, device_id = "cuda", int(device[5:])
        config = _capi.ContextConfig()
        config.struct_size = ctypes.sizeof(config)
        config.device_type = _device_kind(kind)
        config.device_id = device_id
        config.memory_limit_bytes = memory_limit
        config.cpu_threads = cpu_threads
        self._handle = None
        self._handle = _new_handle(_lib.kf_context_create, ctypes.byref(config))
        self.is_cuda = config.device_type == _capi.DEVICE_CUDA
        self.device_id = device_id
        # The frontend's own default stream: unlike the library's (NULL), it has a native handle
        # that DLPack exchanges can order other runtimes' streams against.
        self.default_stream = Stream(self)

    @property
    def device(self):
        return ("cuda" if self.is_cuda else "cpu", self.device_id)

    def close(self):
        if self._handle is not None:
            handle, self._handle = self._handle, None
            _check(_lib.kf_context_destroy(handle))
        _dlpack.release_dropped()

    def __repr__(self):
        state = "closed" if self._handle is None else f"{self.device[0]}:{self.device_id}"
        return f"kernel_fusion.Context({state})"

    def stream(self, priority=0, non_blocking=True):
        """A new stream; priority follows CUDA (lower is more urgent) and is clamped to the range."""
        return Stream(self, priority, non_blocking)

    def wrap_stream(self, native):
        """Borrows a native stream (an int `cudaStream_t`, e.g. torch's `.cuda_stream`; 0: the
        legacy default stream). The native stream is not destroyed with the wrapper."""
        handle = _new_handle(_lib.kf_stream_wrap_native, self.handle, ctypes.c_void_p(native))
        return Stream._adopt(self, handle)

    def event(self):
        return Event(self)

    def synchronize(self):
        _check(_lib.kf_context_synchronize(self.handle))

    def stream_priority_range(self):
        """(least, greatest) stream priority; greatest is the most urgent (numerically smallest)."""
        least, greatest = ctypes.c_int32(), ctypes.c_int32()
        _check(_lib.kf_context_get_stream_priority_range(self.handle, ctypes.byref(least),
                                                         ctypes.byref(greatest)))
        return least.value, greatest.value

    def memory_stats(self):
        """A dict: in_use_bytes, reserved_bytes, peak_in_use_bytes, limit_bytes, allocation_count."""
        _dlpack.release_dropped()
        stats = _capi.MemoryStats()
        stats.struct_size = ctypes.sizeof(stats)
        _check(_lib.kf_context_get_memory_stats(self.handle, ctypes.byref(stats)))
        return {name: getattr(stats, name) for name, _ in stats._fields_ if name != "struct_size"}

    def reset_peak_memory(self):
        _check(_lib.kf_context_reset_peak_memory(self.handle))

    def trim_memory(self, keep_bytes=0):
        _check(_lib.kf_context_trim_memory(self.handle, keep_bytes))

    def empty(self, shape, dtype="float32", stream=None):
        """An uninitialised contiguous tensor from the pool, allocated in order on `stream`."""
        stream = self._stream(stream)
        handle = _new_handle(_lib.kf_tensor_create_async, self.handle,
                             ctypes.byref(_desc(shape, dtype)), stream.handle)
        return Tensor._adopt(self, handle, stream)

    def copy_from_host(self, data, stream=None):
        """A new tensor holding a copy of a host buffer: any buffer-protocol object (a NumPy
        array, an array.array ...), whose memoryview gives the shape and element type."""
        view = memoryview(data)
        tensor = self.empty(view.shape, _buffer_dtype(view), stream)
        tensor.copy_from_host(view, stream)
        return tensor

    def from_dlpack(self, obj, stream=None):
        """Imports any DLPack producer (an object with __dlpack__ and __dlpack_device__) without
        copying. On CUDA the producer orders its pending work before `stream` (default: the
        context's), as the protocol asks, and `stream` is the tensor's home: work on other
        streams of the context waits for it before reading the tensor. The producer's memory is
        released when the last tensor using it is closed, after the work of every stream. A Tensor of this context is returned as it is; one of another Context
        raises DeviceMismatchError (move data between contexts with copies, not views)."""
        if isinstance(obj, Tensor):
            if obj.context is not self:
                raise DeviceMismatchError(7, "the tensor belongs to another Context")
            return obj
        if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
            raise TypeError(f"{type(obj).__name__} is not a DLPack producer (no __dlpack__ and "
                            "__dlpack_device__); copy host buffers with Context.copy_from_host")
        stream = self._stream(stream)
        kind, _ = obj.__dlpack_device__()
        kwargs = {}
        if kind in (_dlpack.CUDA, _dlpack.CUDA_MANAGED):
            native = stream.native
            kwargs["stream"] = native if native not in (0, None) else 1  # 1: the legacy stream
        try:
            capsule = obj.__dlpack__(max_version=(1, 0), **kwargs)
        except TypeError:  # a producer of the protocol before DLPack 1.0
            capsule = obj.__dlpack__(**kwargs)
        address, versioned = _dlpack.open_capsule(capsule)
        # The producer made its data ready on `stream`, which becomes the tensor's home: a use on
        # another stream of the context waits for it, and the producer's memory is released only
        # after every stream's work.
        fn = (_lib.kf_tensor_from_dlpack_async if versioned
              else _lib.kf_tensor_from_dlpack_legacy_async)
        # On failure the capsule still owns the producer's tensor; on success the new tensor does.
        handle = _new_handle(fn, self.handle, ctypes.c_void_p(address), stream.handle)
        _dlpack.mark_consumed(capsule, versioned)
        return Tensor._adopt(self, handle, stream)

    def _stream(self, stream):
        if stream is None:
            return self.default_stream
        if not isinstance(stream, Stream):
            raise TypeError(f"stream must be a kernel_fusion.Stream or None, not {type(stream)}")
        return stream

    def _order(self, waiter, writer):
        """Makes `waiter` (a Stream) wait for the work queued so far on `writer`."""
        if waiter.native == writer.native and waiter.native is not None:
            return
        event = Event(self)
        try:
            event.record(writer)
            waiter.wait(event)
        finally:
            event.close()


class Stream(_Owned):
    """An ordered queue of work on a context's device (CUDA) or an immediate one (CPU)."""

    _kind, _destroy = "stream", "kf_stream_destroy"

    def __init__(self, context, priority=0, non_blocking=True):
        config = _capi.StreamConfig()
        config.struct_size = ctypes.sizeof(config)
        config.priority = priority
        config.flags = _capi.STREAM_NON_BLOCKING if non_blocking else 0
        self._open(context, _lib.kf_stream_create, context.handle, ctypes.byref(config))

    @classmethod
    def _adopt(cls, context, handle):
        s = cls.__new__(cls)
        s.context, s._handle = context, handle
        return s

    @property
    def native(self):
        """The `cudaStream_t` as an int (None on the CPU)."""
        out = ctypes.c_void_p()
        _check(_lib.kf_stream_get_native(self.handle, ctypes.byref(out)))
        return out.value if self.context.is_cuda else None

    @property
    def priority(self):
        out = ctypes.c_int32()
        _check(_lib.kf_stream_get_priority(self.handle, ctypes.byref(out)))
        return out.value

    def synchronize(self):
        _check(_lib.kf_stream_synchronize(self.handle))

    def wait(self, event):
        """Future work on this stream waits for `event` (no host blocking)."""
        _check(_lib.kf_stream_wait_event(self.handle, event.handle))

    def record(self):
        """A new Event recorded at the stream's current end."""
        event = Event(self.context)
        event.record(self)
        return event


class Event(_Owned):
    """A point in a stream, for ordering and timing."""

    _kind, _destroy = "event", "kf_event_destroy"

    def __init__(self, context):
        self._open(context, _lib.kf_event_create, context.handle)

    def record(self, stream=None):
        _check(_lib.kf_event_record(self.handle, self.context._stream(stream).handle))

    def synchronize(self):
        _check(_lib.kf_event_synchronize(self.handle))

    def query(self):
        """True once the work before the last record has finished."""
        done = ctypes.c_int32()
        _check(_lib.kf_event_query(self.handle, ctypes.byref(done)))
        return bool(done.value)

    def elapsed_ms(self, end):
        """Milliseconds from this event to `end` (both recorded and complete)."""
        ms = ctypes.c_float()
        _check(_lib.kf_event_elapsed_ms(self.handle, end.handle, ctypes.byref(ms)))
        return ms.value


# ---- tensors ----------------------------------------------------------------------------------

_BUFFER_FORMATS = {("f", 4): "float32", ("e", 2): "float16", ("d", 8): "float64",
                   ("b", 1): "int8", ("B", 1): "uint8", ("i", 4): "int32", ("l", 4): "int32",
                   ("q", 8): "int64", ("l", 8): "int64"}


def _buffer_dtype(view):
    fmt = view.format.lstrip("@=<")
    try:
        return _BUFFER_FORMATS[(fmt, view.itemsize)]
    except KeyError:
        raise TypeError(f"buffer format {view.format!r} ({view.itemsize} bytes) has no "
                        "kernel_fusion dtype") from None


class _WriterCell:
    """The stream whose work last wrote a tensor's memory, shared by the tensor and its views."""

    __slots__ = ("stream",)

    def __init__(self, stream):
        self.stream = stream


class Tensor(_Owned):
    """An n-dimensional array in a Context's memory: owned, a view, or borrowed through DLPack.

    Exported with __dlpack__ (np.from_dlpack, torch.from_dlpack, cupy.from_dlpack ...) without a
    copy. close() destroys the handle; memory shared with views or DLPack consumers lives on
    until the last of them lets go.
    """

    _kind, _destroy = "tensor", "kf_tensor_destroy"

    @classmethod
    def _adopt(cls, context, handle, writer):
        t = cls.__new__(cls)
        t.context = context
        t._handle = handle
        # The stream whose work last wrote the memory, for DLPack ordering: one cell for a tensor
        # and its views (writer is then the base's cell), since a write through any of them is a
        # write to the memory they share.
        t._writer_cell = writer if isinstance(writer, _WriterCell) else _WriterCell(writer)
        d = _capi.TensorDesc()
        _check(_lib.kf_tensor_get_desc(handle, ctypes.byref(d)))
        t.shape = tuple(d.shape[i] for i in range(d.ndim))
        t.strides = tuple(d.strides[i] for i in range(d.ndim))
        t.dtype = _capi.DTYPE_NAMES[d.dtype]
        return t

    @property
    def _writer(self):
        return self._writer_cell.stream

    @_writer.setter
    def _writer(self, stream):
        self._writer_cell.stream = stream

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self):
        return _capi.DTYPES[self.dtype][1]

    @property
    def nbytes(self):
        return self.size * self.itemsize

    @property
    def data_ptr(self):
        out = ctypes.c_void_p()
        _check(_lib.kf_tensor_get_data(self.handle, ctypes.byref(out)))
        return out.value or 0

    @property
    def device(self):
        return self.context.device

    def __repr__(self):
        return (f"kernel_fusion.Tensor(shape={list(self.shape)}, dtype={self.dtype}, "
                f"strides={list(self.strides)}, device={self.device[0]}:{self.device[1]})")

    def view(self, shape, strides=None, offset=0):
        """A view of the same memory (element strides, offset in elements from this tensor's first
        element); the library refuses views that reach outside the memory."""
        handle = _new_handle(_lib.kf_tensor_create_view, self.handle,
                             ctypes.byref(_desc(shape, self.dtype, strides)), offset)
        return Tensor._adopt(self.context, handle, self._writer_cell)

    def copy_from_host(self, data, stream=None):
        """Copies a host buffer holding every element in row-major order (blocks the host)."""
        view = memoryview(data)
        if view.nbytes == 0:  # (cast refuses shapes with a zero: np.zeros((3, 0)))
            raw = memoryview(b"")
        else:
            raw = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
        if raw.nbytes != self.nbytes:
            raise ValueError(f"the buffer holds {raw.nbytes} bytes; the tensor takes {self.nbytes}")
        if raw.readonly:
            raw = memoryview(bytearray(raw))
        buffer = (ctypes.c_char * raw.nbytes).from_buffer(raw) if raw.nbytes else None
        stream = self.context._stream(stream)
        _check(_lib.kf_tensor_copy_from_host(self.handle, buffer, raw.nbytes, stream.handle))
        self._writer = stream

    def to_bytes(self, stream=None):
        """The elements in row-major order (blocks the host until they are copied)."""
        out = bytearray(self.nbytes)
        buffer = (ctypes.c_char * len(out)).from_buffer(out) if out else None
        _check(_lib.kf_tensor_copy_to_host(self.handle, buffer, len(out),
                                           self.context._stream(stream).handle))
        return bytes(out)

    def numpy(self):
        """A NumPy array: sharing the memory for a CPU tensor, a copy for a CUDA one (bfloat16,
        which NumPy lacks, is refused)."""
        import numpy as np

        if self.dtype == "bfloat16":
            raise TypeError("NumPy has no bfloat16; export with DLPack to a framework that has")
        if not self.context.is_cuda:
            return np.from_dlpack(self)
        return np.frombuffer(self.to_bytes(), dtype=self.dtype).reshape(self.shape)

    def __dlpack_device__(self):
        if self.context.is_cuda:
            return (_dlpack.CUDA, self.context.device_id)
        return (_dlpack.CPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("kernel_fusion exports tensors without copying (copy=True asked)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"the tensor is on {self.__dlpack_device__()}, not {dl_device}")
        if self.context.is_cuda and stream != -1:
            # The consumer's stream (None and 1: the legacy default stream; 2: per-thread default)
            # waits for the work that wrote the tensor.
            native = 0 if stream in (None, 1) else stream
            consumer = self.context.wrap_stream(native)
            try:
                self.context._order(consumer, self._writer)
            finally:
                consumer.close()
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        fn = _lib.kf_tensor_to_dlpack if versioned else _lib.kf_tensor_to_dlpack_legacy
        return _dlpack.make_capsule(_new_handle(fn, self.handle), versioned)


# ---- ops --------------------------------------------------------------------------------------


def _h(t, name, required=True):
    if t is None:
        if required:
            raise TypeError(f"{name} is required")
        return None
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a kernel_fusion.Tensor, not {type(t).__name__} (import "
                        "arrays with Context.from_dlpack)")
    return t.handle


def _act(activation):
    try:
        return _capi.ACTIVATIONS[activation]
    except (KeyError, TypeError):
        raise ValueError(f"activation must be one of {', '.join(k for k in _capi.ACTIVATIONS if k)}"
                         f", not {activation!r}") from None


def _prepare(x, out, stream, shape=None):
    """(context, stream, out): out allocated like x (or of `shape`) where it is None."""
    _h(x, "x")
    ctx = x.context
    stream = ctx._stream(stream)
    if out is None:
        out = ctx.empty(x.shape if shape is None else shape, x.dtype, stream)
    return ctx, stream, out


def _written(stream, *tensors):
    for t in tensors:
        if t is not None:
            t._writer = stream


def _elementwise(fn, a, b, activation, out, stream):
    ctx, stream, out = _prepare(a, out, stream)
    _check(fn(ctx.handle, a.handle, _h(b, "b"), _h(out, "out"), _act(activation), stream.handle))
    _written(stream, out)
    return out


def add_activation(a, b, *, activation=None, out=None, stream=None):
    """out = act(a + b), b broadcast onto a (NumPy rules)."""
    return _elementwise(_lib.kf_fused_elementwise_add_activation, a, b, activation, out, stream)


def mul_activation(a, b, *, activation=None, out=None, stream=None):
    """out = act(a * b), b broadcast onto a (NumPy rules)."""
    return _elementwise(_lib.kf_fused_elementwise_mul_activation, a, b, activation, out, stream)


def bias_activation(x, bias, *, activation="gelu", out=None, stream=None):
    """out = act(x + bias), bias of shape [x.shape[-1]]."""
    ctx, stream, out = _prepare(x, out, stream)
    _check(_lib.kf_fused_bias_activation(ctx.handle, x.handle, _h(bias, "bias"), _h(out, "out"),
                                         _act(activation), stream.handle))
    _written(stream, out)
    return out


def gelu_dropout(x, p, *, training=True, seed=0, offset=0, out=None, mask_out=None, stream=None):
    """out = dropout(gelu(x)) with Philox(seed, offset): the same mask on the CPU and CUDA.
    mask_out (uint8, x's shape) receives 1 where kept."""
    ctx, stream, out = _prepare(x, out, stream)
    seed, offset = _integer(seed, "seed", *_UINT64), _integer(offset, "offset", *_UINT64)
    _check(_lib.kf_fused_gelu_dropout(ctx.handle, x.handle, _h(out, "out"),
                                      _h(mask_out, "mask_out", False), float(p), int(bool(training)),
                                      seed, offset, stream.handle))
    _written(stream, out, mask_out)
    return out


def layer_norm(x, weight=None, bias=None, *, normalized_ndim=1, eps=1e-5, activation=None,
               out=None, mean_out=None, rstd_out=None, stream=None):
    """act(layer norm over the last `normalized_ndim` dims, then * weight + bias); mean_out and
    rstd_out (x's leading shape, f32 for 16-bit x) receive the statistics."""
    normalized_ndim = _integer(normalized_ndim, "normalized_ndim", *_INT32)
    ctx, stream, out = _prepare(x, out, stream)
    _check(_lib.kf_fused_layer_norm_activation(
        ctx.handle, x.handle, _h(weight, "weight", False), _h(bias, "bias", False), _h(out, "out"),
        _h(mean_out, "mean_out", False), _h(rstd_out, "rstd_out", False), normalized_ndim,
        float(eps), _act(activation), stream.handle))
    _written(stream, out, mean_out, rstd_out)
    return out


def rms_norm(x, weight=None, *, residual=None, eps=1e-6, activation=None, out=None,
             residual_out=None, stream=None):
    """act(rms_norm(h) * weight), h = x + residual (written to residual_out when given)."""
    ctx, stream, out = _prepare(x, out, stream)
    _check(_lib.kf_fused_rms_norm_activation(
        ctx.handle, x.handle, _h(residual, "residual", False), _h(weight, "weight", False),
        _h(out, "out"), _h(residual_out, "residual_out", False), float(eps), _act(activation),
        stream.handle))
    _written(stream, out, residual_out)
    return out


def softmax(x, mask=None, *, scale=1.0, causal=False, out=None, stream=None):
    """softmax(scale * x + mask) over the last dim (mask additive, broadcastable). causal hides
    position (i, j) of x's last two dims [Lq, Lk] where j > i + (Lk - Lq): the diagonal aligned to
    the bottom-right, so the last query row sees every key (square x: j > i)."""
    ctx, stream, out = _prepare(x, out, stream)
    _check(_lib.kf_fused_softmax(ctx.handle, x.handle, _h(mask, "mask", False), _h(out, "out"),
                                 float(scale), int(bool(causal)), stream.handle))
    _written(stream, out)
    return out


def log_softmax(x, mask=None, *, scale=1.0, causal=False, out=None, stream=None):
    """log(softmax(...)), as softmax()."""
    ctx, stream, out = _prepare(x, out, stream)
    _check(_lib.kf_log_softmax(ctx.handle, x.handle, _h(mask, "mask", False), _h(out, "out"),
                               float(scale), int(bool(causal)), stream.handle))
    _written(stream, out)
    return out


def batch_norm(x, weight=None, bias=None, running_mean=None, running_var=None, *, training=False,
               momentum=0.1, eps=1e-5, activation=None, layout="nchw", out=None, stream=None):
    """act(batch norm): batch statistics when training (updating the running ones), else the
    running ones; layout "nchw" (channels at dim 1) or "nhwc" (channels last)."""
    try:
        layout_code = _capi.LAYOUTS[layout.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"layout must be 'nchw' or 'nhwc', not {layout!r}") from None
    ctx, stream, out = _prepare(x, out, stream)
    _check(_lib.kf_fused_batch_norm_activation(
        ctx.handle, x.handle, _h(weight, "weight", False), _h(bias, "bias", False),
        _h(running_mean, "running_mean", False), _h(running_var, "running_var", False),
        _h(out, "out"), int(bool(training)), float(momentum), float(eps), _act(activation),
        layout_code, stream.handle))
    _written(stream, out, running_mean, running_var)
    return out


def reduce(x, op, axes=None, *, keepdim=False, out=None, stream=None):
    """op in sum, mean, max, min, sum_squares, mean_abs, l2_norm over `axes` (an int, a non-empty
    sequence of ints, or None for every dim)."""
    try:
        code = _capi.REDUCE_OPS[op]
    except (KeyError, TypeError):
        raise ValueError(f"op must be one of {', '.join(_capi.REDUCE_OPS)}, not {op!r}") from None
    _h(x, "x")
    if axes is None:
        axes = tuple(range(x.ndim))
    elif hasattr(axes, "__index__") or not hasattr(axes, "__iter__"):  # one axis (or a wrong one)
        axes = (axes,)
    axes = tuple(_integer(a, "an axis", *_INT32) for a in axes)
    if not axes and x.ndim:
        # The C API reads no axes as every axis; NumPy reads axis=() as none. Neither is guessed.
        raise ValueError("axes is empty: pass None to reduce over every dim")
    if out is None:  # the library validates the axes; the shape here only needs them in range
        wanted = {a % x.ndim for a in axes if -x.ndim <= a < x.ndim} if x.ndim else set()
        shape = [1 if i in wanted else d for i, d in enumerate(x.shape) if keepdim or i not in wanted]
    else:
        shape = None
    ctx, stream, out = _prepare(x, out, stream, shape)
    array = (ctypes.c_int32 * max(len(axes), 1))(*axes)
    _check(_lib.kf_reduce(ctx.handle, x.handle, _h(out, "out"), code, array, len(axes),
                          int(bool(keepdim)), stream.handle))
    _written(stream, out)
    return out


from ._graph import FusedKernel, Graph  # noqa: E402 (uses the names above)
