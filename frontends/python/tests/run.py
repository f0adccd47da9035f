"""CTest entry of the Python frontend's tests: `run.py --device cpu|cuda [pytest args]`.

Exits 77 (CTest: skipped) when the tests cannot run here -- NumPy or pytest missing, or, for
--device cuda, no usable CUDA device -- and otherwise with pytest's status (5, no tests collected,
counts as a failure)."""

import importlib.util
import os
import sys

sys.dont_write_bytecode = True

SKIPPED = 77


def main(argv):
    missing = [m for m in ("numpy", "pytest") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"skipped: Python modules missing: {', '.join(missing)} (pip install {' '.join(missing)})")
        return SKIPPED
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(here))  # the kernel_fusion package
    import kernel_fusion as kf
    import pytest

    device = argv[argv.index("--device") + 1] if "--device" in argv else "cpu"
    print(f"kernel_fusion {'.'.join(map(str, kf.version()))} from {kf.library_path()}")
    if device == "cuda" and kf.device_count("cuda") == 0:
        print("skipped: no usable CUDA device")
        return SKIPPED
    args = ["-q", "-rs", "-p", "no:cacheprovider", here]
    if device == "cpu":  # the framework exchange is CUDA's
        args.append("--ignore=" + os.path.join(here, "test_frameworks.py"))
    return pytest.main(args + argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
