"""float64 references for the frontend tests (NumPy), and the Philox-4x32-10 stream that the
dropout contract names (include/kernel_fusion/ops.h: curand's numbers, counter (j / 4, offset),
key seed, word j % 4 for number j; element i takes half i % 2 of number i // 2)."""

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def activation(name, v):
    v = np.asarray(v, dtype=np.float64)
    if name in (None, "none"):
        return v
    if name == "relu":
        return np.maximum(v, 0.0)
    if name == "gelu":
        return 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))
    if name == "silu":
        return v / (1.0 + np.exp(-v))
    if name == "tanh":
        return np.tanh(v)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-v))
    raise ValueError(name)


TOLERANCE = {"float64": (1e-12, 1e-12), "float32": (2e-5, 2e-6), "float16": (2e-3, 2e-3),
             "bfloat16": (1e-2, 1e-3)}


def assert_close(actual, expected, dtype, scale=1.0):
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol,
                               atol=atol * scale)


_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_MASK = np.uint64(0xFFFFFFFF)


def philox_words(seed, offset, count):
    """The first `count` 32-bit numbers of curand's Philox4_32_10 after
    curand_init(seed, offset, 0)."""
    blocks = (count + 3) // 4
    index = np.arange(blocks, dtype=np.uint64)
    c0, c1 = index & _MASK, index >> np.uint64(32)
    c2 = np.full(blocks, offset & 0xFFFFFFFF, np.uint64)
    c3 = np.full(blocks, offset >> 32, np.uint64)
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    for round_ in range(10):
        p0, p1 = _M0 * c0, _M1 * c2  # exact: both factors < 2^32
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        if round_ < 9:
            k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
    return np.stack([c0, c1, c2, c3], axis=1).reshape(-1)[:count].astype(np.uint32)


def dropout_keep(seed, offset, count, p):
    """The keep decisions of elements 0..count-1: element i takes the low (even i) or high (odd i)
    16 bits v of number i // 2, and keeps when u = v * 2^-16 >= p."""
    words = philox_words(seed, offset, (count + 1) // 2)
    halves = np.stack([words & np.uint32(0xFFFF), words >> np.uint32(16)], axis=1).reshape(-1)
    u = halves[:count].astype(np.float64) * 2.0**-16
    return u >= p
