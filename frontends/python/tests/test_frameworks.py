"""Zero-copy exchange with the GPU frameworks (PyTorch, CuPy) on a CUDA context: tensors borrowed
both ways, ops on a framework's own stream, and DLPack's stream ordering with no synchronisation.
Runs with --device cuda; each framework's tests skip where it is not installed."""

import math

import numpy as np
import pytest

import kernel_fusion as kf

pytestmark = pytest.mark.usefixtures("cuda_only")


@pytest.fixture
def cuda_only(device):
    if device != "cuda":
        pytest.skip("framework exchange runs with --device cuda")


TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 2e-2}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_tensors_both_ways(ctx, dtype):
    torch = pytest.importorskip("torch")
    tdtype = getattr(torch, dtype)
    x = torch.randn(96, 1000, device=f"cuda:{ctx.device_id}", dtype=tdtype) * 3
    w = torch.randn(1000, device=x.device, dtype=tdtype)
    b = torch.randn(1000, device=x.device, dtype=tdtype)
    t = ctx.from_dlpack(x)
    assert t.data_ptr == x.data_ptr() and t.shape == (96, 1000) and t.dtype == dtype
    stream = ctx.wrap_stream(torch.cuda.current_stream().cuda_stream)  # torch's own stream
    y = kf.softmax(t, scale=0.5, stream=stream)
    ln = kf.layer_norm(t, ctx.from_dlpack(w), ctx.from_dlpack(b), eps=1e-5, activation="gelu",
                       stream=stream)
    yt, lnt = torch.from_dlpack(y), torch.from_dlpack(ln)
    assert yt.data_ptr() == y.data_ptr and yt.dtype == tdtype  # borrowed, not copied
    xd = x.double()
    ref = torch.softmax(0.5 * xd, -1)
    ref_ln = torch.nn.functional.gelu(torch.nn.functional.layer_norm(xd, (1000,), w.double(),
                                                                     b.double(), 1e-5))
    torch.testing.assert_close(yt.double(), ref, rtol=TOL[dtype], atol=TOL[dtype] / 10)
    torch.testing.assert_close(lnt.double(), ref_ln, rtol=TOL[dtype], atol=TOL[dtype] * 4)
    t.close()
    y.close()  # torch's view keeps the memory
    torch.testing.assert_close(yt.double(), ref, rtol=TOL[dtype], atol=TOL[dtype] / 10)


def test_torch_ordering_without_synchronisation(ctx):
    """A torch side stream writes x at the end of a long queue; kf reads it on its own stream and
    queues a long chain on it; a torch reader stream copies kf's result. Each hand-over is a
    stream wait, not a host sync: without them x would be read as NaN, or the result before the
    chain's end (a frontend without them fails this test)."""
    torch = pytest.importorskip("torch")
    dev = f"cuda:{ctx.device_id}"
    side, reader = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)
    a = torch.randn(4096, 4096, device=dev)
    # Every kernel used below runs once first: loading a module lazily can synchronise the device,
    # which would order the streams by itself.
    two = ctx.from_dlpack(torch.tensor(2.0, device=dev))
    w = ctx.from_dlpack(torch.ones(512, 4096, device=dev))
    kf.mul_activation(w, two, out=w)
    kf.rms_norm(w).close()
    (a @ a).div_(a.norm())
    torch.full((2,), float("nan"), device=dev).copy_(a[0, :2]).clone()
    torch.cuda.synchronize(dev)
    with torch.cuda.stream(side):
        x = torch.full((512, 4096), float("nan"), device=dev)
        busy = a
        for _ in range(30):  # milliseconds of work queued before x is written
            busy = busy @ a
            busy /= busy.norm()
        x.copy_(busy[:512])
        t = ctx.from_dlpack(x)  # torch's side stream is current: kf's stream waits for it
    y = kf.rms_norm(t, eps=1e-6)
    for _ in range(40):
        kf.mul_activation(y, two, out=y)  # y * 2^40, exactly, at the end of a long kf queue
    with torch.cuda.stream(reader):
        snapshot = torch.from_dlpack(y).clone()  # the reader stream waits for kf's stream
    torch.cuda.synchronize(dev)
    xd = busy[:512].double()
    ref = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * 2.0**40
    assert not torch.isnan(snapshot).any()
    torch.testing.assert_close(snapshot.double(), ref, rtol=1e-4, atol=1e-5 * 2.0**40)


def test_cupy_arrays_both_ways(ctx):
    cp = pytest.importorskip("cupy")
    with cp.cuda.Device(ctx.device_id):
        x = cp.random.standard_normal((33, 4099), dtype=cp.float32)
        bias = cp.random.standard_normal((4099,), dtype=cp.float32)
        strided = x[:, ::2]  # a non-contiguous view, borrowed with its strides
        t = ctx.from_dlpack(strided)
        assert t.strides == (4099, 2) and t.data_ptr == strided.data.ptr
        out = kf.bias_activation(ctx.from_dlpack(x), ctx.from_dlpack(bias), activation="gelu")
        mean = kf.reduce(t, "mean_abs", 0)
        got, got_mean = cp.from_dlpack(out), cp.from_dlpack(mean)
        assert got.data.ptr == out.data_ptr
        v = cp.asnumpy(x).astype(np.float64) + cp.asnumpy(bias)
        erf = np.vectorize(math.erf)
        np.testing.assert_allclose(cp.asnumpy(got), 0.5 * v * (1 + erf(v / math.sqrt(2))),
                                   rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(cp.asnumpy(got_mean),
                                   np.abs(cp.asnumpy(strided).astype(np.float64)).mean(0),
                                   rtol=2e-5, atol=2e-6)


def test_host_memory_is_refused_by_a_cuda_context(ctx):
    with pytest.raises(kf.DeviceMismatchError):
        ctx.from_dlpack(np.ones(4, np.float32))


def test_ops_replay_inside_a_captured_cuda_graph(ctx):
    """The ops enqueue nothing but kernels once their outputs exist: a torch CUDA graph captures
    a chain of them on torch's stream, and each replay recomputes it from x's new contents."""
    torch = pytest.importorskip("torch")
    from reference import dropout_keep

    dev = f"cuda:{ctx.device_id}"
    x = torch.randn(64, 4096, device=dev)
    w = torch.randn(4096, device=dev)
    xt, wt = ctx.from_dlpack(x), ctx.from_dlpack(w)
    soft, norm, drop = (ctx.empty(x.shape, "float32") for _ in range(3))
    col = ctx.empty((4096,), "float32")
    mask = ctx.empty(x.shape, "uint8")
    side = torch.cuda.Stream(device=dev)
    stream = ctx.wrap_stream(side.cuda_stream)

    def chain():
        kf.softmax(xt, scale=0.5, out=soft, stream=stream)
        kf.layer_norm(soft, wt, eps=1e-5, out=norm, stream=stream)
        kf.reduce(norm, "mean_abs", 0, out=col, stream=stream)
        kf.gelu_dropout(norm, 0.2, seed=11, offset=3, out=drop, mask_out=mask, stream=stream)

    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        chain()  # outside the capture: kernels loaded, launch settings cached
    torch.cuda.synchronize(dev)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side, capture_error_mode="relaxed"):
        chain()
    for _ in range(2):
        x.copy_(torch.randn_like(x) * 4)
        torch.cuda.synchronize(dev)
        for t in (soft, norm, col, drop):
            torch.from_dlpack(t).fill_(float("nan"))
        torch.cuda.synchronize(dev)
        graph.replay()
        torch.cuda.synchronize(dev)
        xd = x.double()
        ref_soft = torch.softmax(0.5 * xd, -1)
        ref_norm = torch.nn.functional.layer_norm(ref_soft, (4096,), w.double(), None, 1e-5)
        keep = torch.from_numpy(dropout_keep(11, 3, x.numel(), 0.2).reshape(64, 4096)).to(dev)
        gelu = torch.nn.functional.gelu(torch.from_dlpack(norm).double())
        torch.testing.assert_close(torch.from_dlpack(soft).double(), ref_soft, rtol=2e-5, atol=1e-9)
        torch.testing.assert_close(torch.from_dlpack(norm).double(), ref_norm, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(torch.from_dlpack(col).double(),
                                   torch.from_dlpack(norm).double().abs().mean(0),
                                   rtol=1e-5, atol=1e-6)
        assert torch.equal(torch.from_dlpack(mask).bool(), keep)
        torch.testing.assert_close(torch.from_dlpack(drop).double(),
                                   torch.where(keep, gelu / 0.8, 0.0), rtol=2e-5, atol=1e-6)
