"""The runtime through the frontend: contexts, streams, events, memory, copies, and DLPack exchange
with NumPy (zero-copy both ways, the producer's deleter called once, both capsule versions)."""

import sys

import numpy as np
import pytest

import kernel_fusion as kf
from conftest import to_kf


def test_version_and_devices():
    major, minor, _ = kf.version()
    assert (major, minor) >= (0, 2)
    assert kf.device_count("cpu") == 1
    props = kf.device_properties("cpu")
    assert props["device_type"] == "cpu" and props["multiprocessor_count"] >= 1 and props["name"]
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        kf.device_count("gpu")


def test_cuda_without_a_device_is_refused():
    if kf.device_count("cuda") > 0:
        pytest.skip("a CUDA device is present")
    with pytest.raises(kf.NoDeviceError):
        kf.Context("cuda")


def test_memory_limit_and_stats(device):
    with kf.Context(device, memory_limit=1 << 20) as ctx:
        with pytest.raises(kf.OutOfMemoryError, match="limit"):
            ctx.empty((1 << 20,), "float32")
        t = ctx.empty((1000,), "float64")  # the context keeps working
        stats = ctx.memory_stats()
        assert stats["in_use_bytes"] >= 8000 and stats["limit_bytes"] == 1 << 20
        assert stats["allocation_count"] >= 1
        t.close()
        ctx.synchronize()
        assert ctx.memory_stats()["in_use_bytes"] < stats["in_use_bytes"]
        ctx.trim_memory(0)
        ctx.reset_peak_memory()


def test_streams_and_events(ctx, rng):
    least, greatest = ctx.stream_priority_range()
    assert greatest <= least
    urgent = ctx.stream(priority=greatest - 5)  # clamped to the range
    assert urgent.priority == greatest
    start, end = ctx.event(), ctx.event()
    start.record(urgent)
    x = to_kf(ctx, rng.standard_normal((64, 256)).astype(np.float32))
    y = kf.softmax(x, stream=urgent)
    end.record(urgent)
    end.synchronize()
    assert end.query()
    assert start.elapsed_ms(end) >= 0.0
    other = ctx.stream()
    other.wait(urgent.record())
    z = kf.add_activation(y, y, stream=other)
    other.synchronize()
    np.testing.assert_allclose(z.numpy(), 2 * y.numpy(), rtol=1e-6)
    if ctx.is_cuda:
        assert isinstance(urgent.native, int) and urgent.native != 0
    else:
        assert urgent.native is None
    urgent.close()
    with pytest.raises(kf.InvalidHandleError):
        urgent.synchronize()


def test_copies_round_trip(ctx, rng):
    for dtype in ("float32", "float16", "float64", "int32", "uint8"):
        a = (rng.standard_normal((3, 5, 7)) * 50).astype(dtype)
        t = ctx.copy_from_host(a)
        assert t.shape == (3, 5, 7) and t.dtype == dtype and t.strides == (35, 7, 1)
        assert t.to_bytes() == a.tobytes()
        assert np.array_equal(t.numpy(), a)
    t = ctx.empty((4, 4), "float32")
    with pytest.raises(ValueError, match="bytes"):
        t.copy_from_host(np.zeros(3, np.float32))
    t.copy_from_host(np.arange(16, dtype=np.float32)[::-1].reshape(4, 4).T)  # not contiguous
    assert np.array_equal(t.numpy(), np.arange(16, dtype=np.float32)[::-1].reshape(4, 4).T)
    for shape in ((0,), (3, 0), (0, 4, 2)):  # memoryview.cast refuses shapes with a zero
        empty = ctx.copy_from_host(np.zeros(shape, np.float32))
        assert empty.shape == shape and empty.numpy().shape == shape


def test_views_are_checked(ctx):
    t = ctx.copy_from_host(np.arange(24, dtype=np.float32).reshape(4, 6))
    v = t.view((3, 2), strides=(6, 2), offset=7)
    assert np.array_equal(v.numpy(), np.arange(24, dtype=np.float32).reshape(4, 6)[1:, 1::2][:, :2])
    with pytest.raises(kf.InvalidArgumentError):
        t.view((4, 7), strides=(6, 1))  # reaches past the memory
    with pytest.raises(ValueError):
        t.view((2,) * 9)


def test_views_share_the_stream_that_last_wrote_them(ctx):
    # DLPack exports order the consumer after the stream that last wrote the memory: a write
    # through a view is a write to its base, and the other way round (each kept its own before).
    base = ctx.copy_from_host(np.arange(24, dtype=np.float32))
    view = base.view((2, 6), strides=(12, 1), offset=6)
    s1, s2 = ctx.stream(), ctx.stream()
    kf.softmax(view, out=view, stream=s1)
    assert base._writer is s1 and view._writer is s1
    ones = ctx.copy_from_host(np.ones(24, np.float32))
    kf.add_activation(base, ones, out=base, stream=s2)
    assert view._writer is s2
    later = base.view((4,))
    assert later._writer is s2
    other = ctx.copy_from_host(np.arange(4, dtype=np.float32))
    assert other._writer is not s2  # another memory keeps its own


def test_dlpack_import_borrows_and_releases_once():
    ctx = kf.Context("cpu")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    before = sys.getrefcount(a)
    t = ctx.from_dlpack(a)
    assert sys.getrefcount(a) == before + 1  # NumPy's DLPack manager holds the array
    assert t.data_ptr == a.ctypes.data and t.strides == (4, 1)
    a[1, 2] = 100.0
    assert np.from_dlpack(t)[1, 2] == 100.0  # the same memory, both ways
    view = t.view((2,), strides=(4,), offset=2)
    t.close()
    assert sys.getrefcount(a) == before + 1  # the view still uses the memory
    assert np.array_equal(view.numpy(), [2.0, 100.0])  # a[0, 2], a[1, 2]
    view.close()
    assert sys.getrefcount(a) == before  # the deleter ran once: once more would go below


def test_dlpack_export_to_numpy_shares_memory():
    ctx = kf.Context("cpu")
    t = ctx.copy_from_host(np.arange(20, dtype=np.float64).reshape(4, 5))
    v = t.view((4, 2), strides=(5, 2), offset=1)
    exported = np.from_dlpack(v)
    assert exported.shape == (4, 2) and exported.strides == (40, 16)
    assert exported.ctypes.data == v.data_ptr
    t.close()
    v.close()  # the export keeps the memory alive
    assert np.array_equal(exported, np.arange(20, dtype=np.float64).reshape(4, 5)[:, 1:5:2])


def test_dlpack_capsule_versions():
    ctx = kf.Context("cpu")
    t = ctx.copy_from_host(np.arange(6, dtype=np.float32))

    class Producer:  # hands out one capsule kind, as producers of either protocol version do
        def __init__(self, capsule):
            self.capsule = capsule

        def __dlpack__(self, **kwargs):
            if "max_version" in kwargs and "versioned" not in repr(self.capsule):
                raise TypeError("an old producer: no max_version")
            return self.capsule

        def __dlpack_device__(self):
            return (1, 0)

    legacy = t.__dlpack__()
    versioned = t.__dlpack__(max_version=(1, 2))
    assert '"dltensor"' in repr(legacy) and '"dltensor_versioned"' in repr(versioned)
    for capsule in (legacy, versioned):
        imported = ctx.from_dlpack(Producer(capsule))
        assert imported.data_ptr == t.data_ptr and imported.shape == (6,)
        assert "used_dltensor" in repr(capsule)
        with pytest.raises(BufferError, match="unconsumed"):
            ctx.from_dlpack(Producer(capsule))  # a consumed capsule is never used twice
    unused = t.__dlpack__(max_version=(1, 0))
    del unused  # released (its deleter run) once dropped: at the next export or close
    t.close()
    with pytest.raises(BufferError):
        ctx.copy_from_host(np.ones(2, np.float32)).__dlpack__(copy=True)


def test_dropped_and_refused_exports_are_released():
    """An export no consumer takes is released once its capsule is dropped, also where the
    consumer drops it while raising (NumPy has no bfloat16): its error stays its own, and the
    memory comes back."""
    with kf.Context("cpu") as ctx:
        before = ctx.memory_stats()["in_use_bytes"]
        t = ctx.empty((1024,), "bfloat16")
        try:
            np.from_dlpack(t)
        except Exception as e:  # noqa: BLE001 - any error of NumPy's own
            assert not isinstance(e, SystemError), repr(e)
        t.__dlpack__(max_version=(1, 0))  # made and dropped unconsumed
        t.__dlpack__()
        t.close()
        assert ctx.memory_stats()["in_use_bytes"] == before


def test_dlpack_takes_any_stride_on_size_one_dims():
    ctx = kf.Context("cpu")
    a = np.arange(4, dtype=np.float32).reshape(1, 4)[::-1]  # stride -16 on the size-1 dim
    assert a.strides[0] < 0
    assert ctx.from_dlpack(a).numpy().tolist() == [[0.0, 1.0, 2.0, 3.0]]


def test_numpy_scalar_types_name_dtypes():
    ctx = kf.Context("cpu")
    for kind, name in ((np.float32, "float32"), (np.float16, "float16"), (np.uint8, "uint8")):
        assert ctx.empty((2,), kind).dtype == name


def test_dlpack_refusals():
    ctx = kf.Context("cpu")
    with pytest.raises(kf.DtypeMismatchError):
        ctx.from_dlpack(np.zeros(4, dtype=np.complex64))
    read_only = np.ones((2, 8), np.float32)
    read_only.flags.writeable = False
    x = ctx.from_dlpack(np.ones((2, 8), np.float32))
    try:
        borrowed = ctx.from_dlpack(read_only)
    except BufferError:
        pytest.skip("this NumPy does not export read-only arrays")
    if np.lib.NumpyVersion(np.__version__) >= "2.1.0":  # read-only flag: DLPack 1.0 capsules
        with pytest.raises(kf.InvalidArgumentError, match="read-only"):
            kf.add_activation(x, x, out=borrowed)
    with pytest.raises(TypeError, match="dtype"):
        ctx.empty((2,), "complex64")
    with pytest.raises(TypeError, match="not a DLPack producer"):
        ctx.from_dlpack([1.0, 2.0])
    with pytest.raises(TypeError, match="has no kernel_fusion dtype"):
        ctx.copy_from_host(np.zeros(2, np.complex64))
    assert ctx.copy_from_host(b"abc").dtype == "uint8"  # a bytes object is a uint8 buffer



def test_threads_share_a_context():
    """Eight threads, one CPU context, each with its own stream and tensors (ctypes releases the
    GIL in every call, so the library's calls overlap)."""
    import threading

    ctx = kf.Context("cpu")
    rng = np.random.default_rng(8)
    inputs = [rng.standard_normal((64, 513)).astype(np.float32) for _ in range(8)]
    results, errors = [None] * 8, []

    def work(i):
        try:
            stream = ctx.stream()
            x = ctx.from_dlpack(inputs[i])
            for _ in range(20):
                y = kf.softmax(x, scale=0.5, stream=stream)
                z = kf.reduce(kf.add_activation(y, x, activation="relu", stream=stream), "sum", 1,
                              stream=stream)
            results[i] = z.numpy()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, x in enumerate(inputs):
        v = x.astype(np.float64)
        e = np.exp(0.5 * v - (0.5 * v).max(-1, keepdims=True))
        expected = np.maximum(e / e.sum(-1, keepdims=True) + v, 0).sum(1)
        np.testing.assert_allclose(results[i], expected, rtol=1e-5, atol=1e-5)
