import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # reference.py


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
    if np.dtype(dtype).kind == "f":
        return ctx.copy_from_host(np.full(shape, np.nan, dtype))
    return ctx.copy_from_host(np.full(shape, 0xAB, dtype))
