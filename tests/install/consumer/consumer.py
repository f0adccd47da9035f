"""A user's Python program run against the *installed* kernel_fusion package: imported from its
install directory (PYTHONPATH) with no KF_LIBRARY, the package must load the library installed with
it, by itself; then softmax on the CPU, on random data into a poisoned output, is checked against
a float64 reference in plain Python (no NumPy). Run by tests/install/run_install_test.cmake:

    consumer.py <install prefix>
"""

import array
import math
import os
import random
import sys


def softmax_rows(values, cols, scale):
    out = []
    for start in range(0, len(values), cols):
        row = [scale * v for v in values[start:start + cols]]
        top = max(row)
        e = [math.exp(v - top) for v in row]
        total = math.fsum(e)
        out += [v / total for v in e]
    return out


def main(prefix):
    import kernel_fusion as kf

    prefix = os.path.realpath(prefix)
    for what, path in (("package", kf.__file__), ("library", kf.library_path())):
        if not os.path.realpath(path).startswith(prefix + os.sep):
            return f"the {what} was loaded from {path}, not from the install prefix {prefix}"
    rows, cols, scale = 3, 37, 0.75
    rng = random.Random(20261129)
    x = array.array("f", [rng.uniform(-4.0, 4.0) for _ in range(rows * cols)])
    with kf.Context("cpu") as ctx:
        t = ctx.empty((rows, cols), "float32")
        t.copy_from_host(x)
        out = ctx.empty((rows, cols), "float32")
        out.copy_from_host(array.array("f", [math.nan] * (rows * cols)))  # unwritten shows
        kf.softmax(t, scale=scale, out=out)
        got = array.array("f", out.to_bytes())
    expected = softmax_rows(x, cols, scale)  # from the float32 values the library saw
    wrong = [i for i, (g, e) in enumerate(zip(got, expected))
             if not abs(g - e) <= 2e-5 * abs(e) + 2e-6]  # NaN fails too
    if wrong:
        i = wrong[0]
        return f"softmax: {len(wrong)} of {rows * cols} wrong, out[{i}] = {got[i]}, expected {expected[i]}"
    print(f"softmax of {rows}x{cols} correct with kernel_fusion "
          f"{'.'.join(map(str, kf.version()))} from {kf.library_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
