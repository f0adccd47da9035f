"""Zero-copy exchange with JAX on a CUDA context: JAX arrays borrowed with Context.from_dlpack,
kernel_fusion's outputs borrowed with jnp.from_dlpack, and DLPack's stream ordering between JAX's
streams and kernel_fusion's with no synchronisation. Runs with --device cuda where JAX has a CUDA
backend; skipped otherwise (conftest.py keeps JAX from preallocating the GPU's memory)."""

import numpy as np
import pytest

import kernel_fusion as kf
from conftest import poisoned
from reference import TOLERANCE, activation, assert_close

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@pytest.fixture
def gpu(device, ctx):
    """JAX's device for the context's GPU."""
    if device != "cuda":
        pytest.skip("the JAX exchange runs with --device cuda")
    try:
        devices = jax.devices("cuda")
    except RuntimeError as e:  # a jaxlib without the CUDA plugin, or one that failed to start
        pytest.skip(f"JAX has no CUDA backend: {e}")
    matching = [d for d in devices if d.local_hardware_id == ctx.device_id]
    if not matching:
        pytest.skip(f"JAX does not see CUDA device {ctx.device_id}")
    return matching[0]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_jax_arrays_both_ways(ctx, gpu, rng, dtype):
    x_host = (3 * rng.standard_normal((96, 1000))).astype(jnp.dtype(dtype))
    b_host = rng.standard_normal(1000).astype(jnp.dtype(dtype))
    x, b = jax.device_put(x_host, gpu), jax.device_put(b_host, gpu)  # copies still in flight
    t = ctx.from_dlpack(x)
    assert t.data_ptr == x.unsafe_buffer_pointer() and t.shape == (96, 1000) and t.dtype == dtype
    soft = kf.softmax(t, scale=0.5, out=poisoned(ctx, t.shape, dtype))
    act = kf.add_activation(t, ctx.from_dlpack(b), activation="gelu",
                            out=poisoned(ctx, t.shape, dtype))
    jsoft, jact = jnp.from_dlpack(soft), jnp.from_dlpack(act)
    assert jsoft.unsafe_buffer_pointer() == soft.data_ptr and jsoft.dtype == x.dtype  # borrowed
    row_sums = jnp.sum(jsoft.astype(jnp.float32), axis=-1)  # JAX computing on kf's memory
    v = x_host.astype(np.float64)
    e = np.exp(0.5 * (v - v.max(-1, keepdims=True)))
    ref_soft = e / e.sum(-1, keepdims=True)
    assert_close(np.asarray(jsoft, np.float64), ref_soft, dtype)
    assert_close(np.asarray(jact, np.float64), activation("gelu", v + b_host.astype(np.float64)),
                 dtype)
    np.testing.assert_allclose(np.asarray(row_sums), 1.0, rtol=TOLERANCE[dtype][0])
    for tensor in (t, soft, act):
        tensor.close()
    # JAX's views keep kf's memory: new tensors cannot take it, and JAX still reads the results
    # (in a new computation: np.asarray of jsoft itself would give the host copy made above).
    reuse = [poisoned(ctx, t.shape, dtype) for _ in range(3)]
    assert_close(np.asarray(jsoft * 2, np.float64), 2 * ref_soft, dtype, scale=2)
    for tensor in reuse:
        tensor.close()


def test_jax_ordering_without_synchronisation(ctx, gpu, rng):
    """JAX writes x at the end of a long computation; kf reads it on its own stream and queues a
    long chain on it; JAX computes on kf's result. Each hand-over is a stream wait that DLPack's
    `stream` argument asks for, not a host sync: without them x would be read before it is written,
    or the result before the chain's end (a frontend without them fails this test)."""

    @jax.jit
    def late(a):  # milliseconds of matrix products before the rows are written
        busy = a
        for _ in range(30):
            busy = busy @ a
            busy = busy / jnp.linalg.norm(busy)
        return busy[:512]

    a = jax.device_put(rng.standard_normal((4096, 4096), dtype=np.float32), gpu)
    two = ctx.from_dlpack(jax.device_put(np.float32(2), gpu))
    # Everything used below runs once first, on other data (x's memory, if it is the warm-up's,
    # then holds nothing like the answer): compiling and loading kernels can synchronise.
    warm = kf.rms_norm(ctx.from_dlpack(late(a.T)), eps=1e-6)
    kf.mul_activation(warm, two, out=warm)
    np.asarray(jnp.from_dlpack(warm) * 0.5)
    ctx.synchronize()

    x = late(a)  # queued on JAX's stream; nothing here waits for it
    t = ctx.from_dlpack(x)  # kf's stream waits for JAX's
    y = kf.rms_norm(t, eps=1e-6)
    for _ in range(40):
        kf.mul_activation(y, two, out=y)  # y * 2^40, exactly, at the end of a long kf queue
    snapshot = np.asarray(jnp.from_dlpack(y) * 0.5)  # JAX's stream waits for kf's
    xd = np.asarray(x, np.float64)
    ref = xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-6) * 2.0**39
    assert not np.isnan(snapshot).any()
    np.testing.assert_allclose(snapshot, ref, rtol=1e-4, atol=1e-5 * 2.0**39)
