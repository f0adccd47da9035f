import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # reference.py
# JAX's GPU backend takes 75% of the GPU's memory when it starts unless this says no; it is set
# here, before any test module is imported, so before test_jax.py imports jax.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", choices=["cpu", "cuda"],
                     help="the backend the op tests run on")


@pytest.fixture(scope="session")
def device(request):
    return request.config.getoption("--device")


@pytest.fixture(scope="session")
def ctx(device):
    import kernel_fusion as kf

    with kf.Context(device) as c:
        yield c


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)


def to_kf(ctx, array):
    """A tensor holding `array`: borrowed (zero-copy, strides kept) on the CPU, copied on CUDA."""
    if ctx.is_cuda:
        return ctx.copy_from_host(np.ascontiguousarray(array))
    return ctx.from_dlpack(array)


def poisoned(ctx, shape, dtype):
    """A tensor of NaN (or 0xAB bytes for integers), so that unwritten elements show."""
    if dtype == "bfloat16":  # NumPy has none: the bits of bfloat16's NaN
        tensor = ctx.empty(shape, dtype)
        tensor.copy_from_host(np.full(shape, 0x7FC0, np.uint16))
        return tensor
    if np.dtype(dtype).kind == "f":
        return ctx.copy_from_host(np.full(shape, np.nan, dtype))
    return ctx.copy_from_host(np.full(shape, 0xAB, dtype))
