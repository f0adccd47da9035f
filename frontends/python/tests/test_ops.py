"""Every op of the frontend against float64 references, on the backend --device names: random data,
odd sizes, broadcasting, strided views, outputs poisoned first."""

import math

import numpy as np
import pytest

import kernel_fusion as kf
from conftest import poisoned, to_kf
from reference import activation, assert_close, dropout_keep

ACTIVATIONS = ["none", "relu", "gelu", "gelu_tanh", "silu", "tanh", "sigmoid"]
FLOATS = ["float32", "float16", "float64"]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("b_shape", [(7, 1023), (1023,), (7, 1), ()])
def test_add_and_mul_activation(ctx, rng, dtype, act, b_shape):
    a = rng.standard_normal((7, 1023)).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    for fn, combine in ((kf.add_activation, np.add), (kf.mul_activation, np.multiply)):
        out = poisoned(ctx, a.shape, dtype)
        result = fn(to_kf(ctx, a), to_kf(ctx, b), activation=act, out=out)
        assert result is out
        expected = activation(act, combine(a.astype(np.float64), b.astype(np.float64)))
        assert_close(out.numpy(), expected, dtype)


def test_elementwise_strided_and_in_place(ctx, rng):
    base = rng.standard_normal((9, 4097)).astype(np.float32)
    original = base.copy()  # a CPU context borrows `base` itself
    a = to_kf(ctx, base)
    view = a.view((4, 1366), strides=(2 * 4097, 3), offset=4097 + 1)  # base[1::2, 1::3]
    expected_view = original[1::2, 1::3]
    b = to_kf(ctx, rng.standard_normal((1366,)).astype(np.float32))
    out = kf.add_activation(view, b, activation="relu")
    assert out.shape == (4, 1366)
    assert_close(out.numpy(), activation("relu", expected_view.astype(np.float64)
                                         + b.numpy().astype(np.float64)), "float32")
    kf.mul_activation(view, b, activation="tanh", out=view)  # in place, through the view
    expected = original.astype(np.float64)
    expected[1::2, 1::3] = np.tanh(expected_view * b.numpy().astype(np.float64))
    assert_close(a.numpy(), expected, "float32")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("act", ["gelu", "relu", "silu"])
def test_bias_activation(ctx, rng, dtype, act):
    x = rng.standard_normal((33, 4099)).astype(dtype)
    bias = rng.standard_normal((4099,)).astype(dtype)
    out = kf.bias_activation(to_kf(ctx, x), to_kf(ctx, bias), activation=act,
                             out=poisoned(ctx, x.shape, dtype))
    assert_close(out.numpy(), activation(act, x.astype(np.float64) + bias), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("length", [1, 7, 1023, 4097])
def test_softmax_and_log_softmax(ctx, rng, dtype, length):
    x = (3 * rng.standard_normal((5, 3, length))).astype(dtype)
    mask = np.where(rng.random((3, length)) < 0.2, -np.inf, 0.25).astype(dtype)
    v = 0.7 * x.astype(np.float64) + mask.astype(np.float64)
    rows = np.arange(3)[:, None]
    v = np.where(np.arange(length)[None, :] > rows + (length - 3), -np.inf, v)  # causal
    top = np.max(v, axis=-1, keepdims=True)
    e = np.where(np.isfinite(top), np.exp(v - np.where(np.isfinite(top), top, 0)), 0.0)
    total = e.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = np.where(total > 0, e / total, 0.0)
        expected_log = np.where(total > 0, v - top - np.log(total), -np.inf)
    out = kf.softmax(to_kf(ctx, x), to_kf(ctx, mask), scale=0.7, causal=True,
                     out=poisoned(ctx, x.shape, dtype))
    assert_close(out.numpy(), expected, dtype)
    log = kf.log_softmax(to_kf(ctx, x), to_kf(ctx, mask), scale=0.7, causal=True)
    got = log.numpy().astype(np.float64)
    assert np.array_equal(np.isneginf(got), np.isneginf(expected_log))
    finite = np.isfinite(expected_log)
    assert_close(got[finite], expected_log[finite], dtype, scale=10)


def test_fully_masked_rows_give_zero(ctx):
    x = np.ones((2, 8), np.float32)
    mask = np.full((8,), -np.inf, np.float32)
    out = kf.softmax(to_kf(ctx, x), to_kf(ctx, mask)).numpy()
    assert np.array_equal(out, np.zeros((2, 8), np.float32))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,ndim", [((6, 1023), 1), ((4, 3, 257), 2), ((2, 4097), 1)])
def test_layer_norm(ctx, rng, dtype, shape, ndim):
    x = (1e2 + rng.standard_normal(shape)).astype(dtype)  # a mean that dwarfs the spread
    norm_shape = shape[len(shape) - ndim:]
    weight = rng.standard_normal(norm_shape).astype(dtype)
    bias = rng.standard_normal(norm_shape).astype(dtype)
    stats_dtype = "float64" if dtype == "float64" else "float32"
    lead = shape[:len(shape) - ndim]
    mean_out, rstd_out = poisoned(ctx, lead, stats_dtype), poisoned(ctx, lead, stats_dtype)
    out = kf.layer_norm(to_kf(ctx, x), to_kf(ctx, weight), to_kf(ctx, bias),
                        normalized_ndim=ndim, eps=1e-5, activation="relu",
                        out=poisoned(ctx, shape, dtype), mean_out=mean_out, rstd_out=rstd_out)
    v = x.astype(np.float64)
    axes = tuple(range(len(shape) - ndim, len(shape)))
    mean = v.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(v.var(axis=axes, keepdims=True) + 1e-5)
    assert_close(out.numpy(), np.maximum((v - mean) * rstd * weight + bias, 0), dtype, scale=4)
    assert_close(mean_out.numpy(), mean.reshape(lead), stats_dtype if dtype != "float16"
                 else "float32", scale=100)
    np.testing.assert_allclose(rstd_out.numpy(), rstd.reshape(lead),
                               rtol=5e-3 if dtype == "float16" else 1e-4)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm_with_residual(ctx, rng, dtype):
    x = rng.standard_normal((13, 2049)).astype(dtype)
    residual = rng.standard_normal((13, 2049)).astype(dtype)
    weight = rng.standard_normal((2049,)).astype(dtype)
    residual_out = poisoned(ctx, x.shape, dtype)
    out = kf.rms_norm(to_kf(ctx, x), to_kf(ctx, weight), residual=to_kf(ctx, residual), eps=1e-6,
                      activation="silu", out=poisoned(ctx, x.shape, dtype),
                      residual_out=residual_out)
    h = (x.astype(np.float64) + residual).astype(dtype)  # h is rounded to the dtype, then normalized
    assert_close(residual_out.numpy(), h.astype(np.float64), dtype)
    hv = h.astype(np.float64)
    expected = activation("silu", hv / np.sqrt((hv * hv).mean(-1, keepdims=True) + 1e-6) * weight)
    assert_close(out.numpy(), expected, dtype, scale=4)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "sum_squares", "mean_abs", "l2_norm"])
@pytest.mark.parametrize("axes,keepdim", [(0, False), (-1, True), ((0, 2), False), (None, False)])
def test_reduce(ctx, rng, dtype, op, axes, keepdim):
    x = rng.standard_normal((37, 5, 129)).astype(dtype)
    v = x.astype(np.float64)
    ax = tuple(range(3)) if axes is None else axes
    ref = {"sum": lambda: v.sum(ax, keepdims=keepdim), "mean": lambda: v.mean(ax, keepdims=keepdim),
           "max": lambda: v.max(ax, keepdims=keepdim), "min": lambda: v.min(ax, keepdims=keepdim),
           "sum_squares": lambda: (v * v).sum(ax, keepdims=keepdim),
           "mean_abs": lambda: np.abs(v).mean(ax, keepdims=keepdim),
           "l2_norm": lambda: np.sqrt((v * v).sum(ax, keepdims=keepdim))}[op]()
    out = kf.reduce(to_kf(ctx, x), op, axes, keepdim=keepdim)
    assert out.shape == np.shape(ref)
    scale = math.sqrt(x.size / max(np.size(ref), 1))
    assert_close(out.numpy(), ref, dtype, scale=scale * 10)


@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_dropout_follows_the_philox_contract(ctx, rng, dtype):
    x = rng.standard_normal((31, 1027)).astype(dtype)
    p, seed, offset = 0.3, 0x123456789, 7
    mask = poisoned(ctx, x.shape, np.uint8)
    out = kf.gelu_dropout(to_kf(ctx, x), p, seed=seed, offset=offset,
                          out=poisoned(ctx, x.shape, dtype), mask_out=mask)
    keep = dropout_keep(seed, offset, x.size, p).reshape(x.shape)
    assert np.array_equal(mask.numpy(), keep.astype(np.uint8))
    assert abs(keep.mean() - (1 - p)) < 4 * math.sqrt(p * (1 - p) / x.size)
    expected = np.where(keep, activation("gelu", x) / (1 - p), 0.0)
    assert_close(out.numpy(), expected, dtype, scale=2)
    other = poisoned(ctx, x.shape, np.uint8)
    kf.gelu_dropout(to_kf(ctx, x), p, seed=seed, offset=offset + 1, mask_out=other)
    assert not np.array_equal(other.numpy(), mask.numpy())
    plain = kf.gelu_dropout(to_kf(ctx, x), p, training=False)
    assert_close(plain.numpy(), activation("gelu", x), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_batch_norm_training_updates_running_stats(ctx, rng, dtype, layout):
    shape = (4, 3, 5, 7) if layout == "nchw" else (4, 5, 7, 3)
    channel = 1 if layout == "nchw" else 3
    x = (5 + 2 * rng.standard_normal(shape)).astype(dtype)
    stat = "float64" if dtype == "float64" else "float32"
    weight, bias = rng.standard_normal(3).astype(stat), rng.standard_normal(3).astype(stat)
    rm0, rv0 = rng.standard_normal(3).astype(stat), (1 + rng.random(3)).astype(stat)
    running_mean, running_var = to_kf(ctx, rm0.copy()), to_kf(ctx, rv0.copy())
    out = kf.batch_norm(to_kf(ctx, x), to_kf(ctx, weight), to_kf(ctx, bias), running_mean,
                        running_var, training=True, momentum=0.25, eps=1e-5, activation="relu",
                        layout=layout, out=poisoned(ctx, shape, dtype))
    v = np.moveaxis(x.astype(np.float64), channel, -1).reshape(-1, 3)
    mean, var, n = v.mean(0), v.var(0), v.shape[0]
    expected = np.maximum((x.astype(np.float64) - _bc(mean, channel)) /
                          np.sqrt(_bc(var, channel) + 1e-5) * _bc(weight, channel) +
                          _bc(bias, channel), 0)
    assert_close(out.numpy(), expected, dtype, scale=4)
    close = "float64" if dtype == "float64" else "float32"
    assert_close(running_mean.numpy(), 0.75 * rm0 + 0.25 * mean, close, scale=10)
    assert_close(running_var.numpy(), 0.75 * rv0 + 0.25 * var * n / (n - 1), close, scale=10)


def _bc(per_channel, channel):
    shape = [1, 1, 1, 1]
    shape[channel] = -1
    return np.asarray(per_channel, np.float64).reshape(shape)


def test_op_errors_name_the_problem(ctx, rng):
    x = to_kf(ctx, rng.standard_normal((4, 8)).astype(np.float32))
    with pytest.raises(kf.ShapeMismatchError, match=r"\[3\]"):
        kf.add_activation(x, to_kf(ctx, np.ones(3, np.float32)))
    with pytest.raises(kf.DtypeMismatchError):
        kf.add_activation(x, to_kf(ctx, np.ones(8, np.float64)))
    with pytest.raises(kf.InvalidArgumentError, match="eps"):
        kf.layer_norm(x, eps=0.0)
    with pytest.raises(kf.InvalidArgumentError):
        kf.gelu_dropout(x, 1.0)
    with pytest.raises(kf.InvalidArgumentError, match="axis|axes|dim"):
        kf.reduce(x, "sum", 5)
    with pytest.raises(ValueError, match="activation"):
        kf.add_activation(x, x, activation="swish")
    # Integers that ctypes would wrap, empty and non-integer axes: refused here, never guessed.
    with pytest.raises(ValueError, match="axis"):
        kf.reduce(x, "sum", 2**32)
    with pytest.raises(ValueError, match="axes is empty"):
        kf.reduce(x, "sum", ())
    with pytest.raises(TypeError, match="axis"):
        kf.reduce(x, "sum", 1.5)
    assert kf.reduce(x, "sum", np.int64(1)).shape == (4,)
    with pytest.raises(ValueError, match="normalized_ndim"):
        kf.layer_norm(x, normalized_ndim=2**32 + 1)
    for seed in (2**64, -1):
        with pytest.raises(ValueError, match="seed"):
            kf.gelu_dropout(x, 0.5, seed=seed)
    with pytest.raises(ValueError, match="offset"):
        kf.gelu_dropout(x, 0.5, offset=2**64 + 3)
    with pytest.raises(TypeError, match="kernel_fusion.Tensor"):
        kf.softmax(np.ones(3))
    closed = to_kf(ctx, np.ones((4, 8), np.float32))
    closed.close()
    with pytest.raises(kf.InvalidHandleError):
        kf.softmax(closed)
