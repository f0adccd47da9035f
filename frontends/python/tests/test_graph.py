"""The fusion engine through the frontend, on the backend --device names: tensor graphs against
float64 references, launch values without recompiling, integer wrapping, and image graphs
(crops of one frame in one launch, planar batched output, colour conversion)."""

import numpy as np
import pytest

import kernel_fusion as kf
from conftest import poisoned, to_kf
from reference import activation, assert_close


def test_tensor_chain_and_launch_values(ctx, rng):
    g = kf.Graph(ctx)
    x, b = g.input("float32", rank=2), g.input("float32", rank=1)
    half = g.scalar(0.5)
    y = g.activation("gelu", g.add(g.mul(x, half), b))
    z = g.clamp(g.unary("exp", g.unary("neg", g.unary("square", x))), g.scalar(0.1), g.scalar(0.9))
    assert g.output(y) == 0 and g.output(z) == 1
    kernel = g.compile(disk_cache=False)
    info = kernel.info
    assert (info["n_inputs"], info["n_outputs"], info["max_items"]) == (2, 2, 1)
    xa = rng.standard_normal((37, 1029)).astype(np.float32)
    ba = rng.standard_normal(1029).astype(np.float32)
    out_y, out_z = poisoned(ctx, xa.shape, np.float32), poisoned(ctx, xa.shape, np.float32)
    assert kernel([to_kf(ctx, xa), to_kf(ctx, ba)], [out_y, out_z]) == [out_y, out_z]
    v = xa.astype(np.float64)
    assert_close(out_y.numpy(), activation("gelu", 0.5 * v + ba), "float32")
    assert_close(out_z.numpy(), np.clip(np.exp(-v * v), 0.1, 0.9), "float32")
    # A launch value replaces the scalar without a new kernel.
    kernel([to_kf(ctx, xa), to_kf(ctx, ba)], [out_y, out_z], values={(half, 0): -2.0})
    assert_close(out_y.numpy(), activation("gelu", -2.0 * v + ba), "float32")
    # The same structure with other values is found in the context's cache.
    g2 = kf.Graph(ctx)
    x2, b2 = g2.input("float32", rank=2), g2.input("float32", rank=1)
    g2.output(g2.activation("gelu", g2.add(g2.mul(x2, g2.scalar(3.0)), b2)))
    g2.output(g2.clamp(g2.unary("exp", g2.unary("neg", g2.unary("square", x2))), g2.scalar(0.0),
                       g2.scalar(1.0)))
    again = g2.compile(disk_cache=False)
    assert again.info["origin"] == "memory_cache"
    assert again.info["structure_hash"] == info["structure_hash"]


def test_integers_wrap_and_casts_saturate(ctx):
    g = kf.Graph(ctx)
    a, b = g.input("uint8", rank=1), g.input("uint8", rank=1)
    g.output(g.add(a, b))
    f = g.input("float32", rank=1)
    with pytest.raises(kf.DtypeMismatchError):
        g.add(a, f)  # binary operands need one dtype
    g.output(g.cast(g.mul(f, g.scalar(100.0)), "uint8", "saturate_round"))
    g.output(g.where(g.binary("gt", f, g.scalar(0.0)), f, g.unary("abs", f)))
    kernel = g.compile()
    ua, ub = np.array([200, 1, 255, 0], np.uint8), np.array([100, 2, 255, 0], np.uint8)
    fa = np.array([1.005, -3.0, 2.555, 0.504], np.float32)
    outs = [poisoned(ctx, (4,), np.uint8), poisoned(ctx, (4,), np.uint8),
            poisoned(ctx, (4,), np.float32)]
    kernel([to_kf(ctx, ua), to_kf(ctx, ub), to_kf(ctx, fa)], outs)
    assert outs[0].numpy().tolist() == [44, 3, 254, 0]  # modulo 256
    expected = np.clip(np.rint(fa.astype(np.float32) * np.float32(100)), 0, 255).astype(np.uint8)
    assert outs[1].numpy().tolist() == expected.tolist()
    assert np.array_equal(outs[2].numpy(), np.abs(fa))


def test_crops_of_one_frame_in_one_launch(ctx, rng):
    frame = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    g = kf.Graph(ctx)
    image = g.image("uint8", channels=3)
    pixels = g.read_image(image, crop=True, border="constant", border_value=7.0)
    g.output(g.normalize(g.color_convert(pixels, "rgb_to_bgr"), [0.5, 0.4, 0.3], [0.2, 0.25, 0.5],
                         scale=1 / 255), layout="planar", batched=True)
    kernel = g.compile(max_items=3)
    crops = [(0, 0, 16, 8), (30, 20, 16, 8), (56, 44, 16, 8)]  # the last reaches past the frame
    out = poisoned(ctx, (3, 3, 8, 16), np.float32)
    source = to_kf(ctx, frame)
    kernel([[source]] * 3, [[out]] * 3, crops=crops)
    padded = np.full((48 + 8, 64 + 16, 3), 7, np.float64)
    padded[:48, :64] = frame
    for i, (x, y, w, h) in enumerate(crops):
        bgr = padded[y:y + h, x:x + w, ::-1] / 255
        expected = ((bgr - [0.5, 0.4, 0.3]) / [0.2, 0.25, 0.5]).transpose(2, 0, 1)
        assert_close(out.numpy()[i], expected, "float32", scale=4)


def test_normalize_takes_one_mean_and_std_a_channel(ctx):
    # The C call reads one mean and one std for each of x's channels from bare pointers: a
    # shorter list was read past its end.
    g = kf.Graph(ctx)
    rgb = g.read_image(g.image("uint8", channels=3))
    for short in ([0.5], [0.5, 0.5], [0.5] * 4):
        with pytest.raises(ValueError, match="3 channels"):
            g.normalize(rgb, short, short)
    gray = g.color_convert(rgb, "rgb_to_gray")
    with pytest.raises(ValueError, match="1 channel;"):
        g.normalize(gray, [0.5] * 3, [0.2] * 3)
    frame = g.read_image(g.nv12())  # NV12 reads give RGB
    wide = g.add(g.cast(frame, "float32"), g.constant([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="3 channels"):
        g.normalize(wide, [0.5], [0.2])
    g.output(g.normalize(gray, [0.5], [0.2]))
    g.output(g.normalize(wide, [0.5] * 3, [0.2] * 3))


def test_bilinear_read_at_the_crop_size_is_exact(ctx, rng):
    frame = rng.random((20, 30, 1)).astype(np.float32)
    g = kf.Graph(ctx)
    image = g.image("float32", channels=1)
    g.output(g.read_image(image, crop=True, interpolation="bilinear"))
    kernel = g.compile()
    out = poisoned(ctx, (6, 9, 1), np.float32)
    kernel([to_kf(ctx, frame)], [out], crops=[(4, 3, 9, 6)])
    assert_close(out.numpy(), frame[3:9, 4:13].astype(np.float64), "float32")


def test_sources_and_errors(ctx):
    g = kf.Graph(ctx)
    x = g.input("float16", rank=1)
    g.output(g.activation("silu", x))
    assert "__global__" in g.source()  # generated on any context, with no GPU
    kernel = g.compile()
    assert (kernel.source != "") == ctx.is_cuda
    with pytest.raises(kf.InvalidArgumentError):
        g.unary("exp", 99)  # no such node
    with pytest.raises(ValueError, match="op must be one of"):
        g.unary("cos", x)
    with pytest.raises(kf.DtypeMismatchError):
        kernel([to_kf(ctx, np.ones(4, np.float32))], [ctx.empty((4,), "float16")])
    with pytest.raises(kf.InvalidArgumentError):
        kf.Graph(ctx).compile()  # no outputs
    g.close()
    with pytest.raises(kf.InvalidHandleError):
        g.scalar(1.0)
