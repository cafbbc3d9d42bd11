"""The PyTorch rounding facts gradsweep's arithmetic relies on (docs/parity.md, "Rounding"), checked on the machine
and the torch that run the suite: add_(alpha), addcmul_ and lerp_ round once (fused multiply-add) on the scalar
loop, the vector loop and a vector loop's scalar tail, mul_().add_() rounds twice, a division by a Python scalar is
a true division, and sum(0) sums in the documented cascade order. A build where these fail (no AVX2/FMA) would make
the bit-level rows of the parity table fail, and this file says why."""
import numpy as np
import pytest

from parity_lib import torch  # noqa: F401  (skips the module without PyTorch)

import torch as T

SIZES = [1, 7, 15, 4096, 4109]  # scalar loop (< 16), vector loop, vector loop + 13-element scalar tail


def one_rounding(a, b, c):
    # a*b is exact in double; the sum rounds at 53 bits, then to float: equal to one rounding except at an exact
    # float midpoint, which random inputs do not hit.
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def two_roundings(a, b, c):
    return (a * b).astype(np.float32) + c


def check(name, got, fused, twice):
    g, f, t = (v.view(np.uint32) for v in (got, fused, twice))
    differ = f != t
    assert differ.sum() > 0, f"{name}: the inputs do not tell one rounding from two"
    assert (g == f).all(), f"{name}: {int((g != f).sum())} of {g.size} elements are not the one-rounding value"


@pytest.mark.parametrize("n", SIZES)
def test_fused_ops_round_once(n):
    rng = np.random.default_rng(n)
    reps = max(1, 4000 // n)
    a = rng.standard_normal((reps, n)).astype(np.float32)
    b = rng.standard_normal((reps, n)).astype(np.float32)
    # add_(b, alpha=0.1): fma(0.1, b, a)
    got = np.stack([T.from_numpy(a[i].copy()).add_(T.from_numpy(b[i]), alpha=0.1).numpy() for i in range(reps)])
    al = np.full_like(a, np.float32(0.1))
    check(f"add_ n={n}", got, one_rounding(al, b, a), two_roundings(al, b, a))
    # addcmul_(b, b, value=0.3): fma(0.3*b, b, a)
    got = np.stack([T.from_numpy(a[i].copy()).addcmul_(T.from_numpy(b[i]), T.from_numpy(b[i]), value=0.3).numpy()
                    for i in range(reps)])
    vb = (np.float32(0.3) * b).astype(np.float32)
    check(f"addcmul_ n={n}", got, one_rounding(vb, b, a), two_roundings(vb, b, a))
    # lerp_(b, 0.1): fma(0.1, b - a, a); lerp_(b, 0.7): fma(-(b - a), 1 - 0.7, b)
    d = (b - a).astype(np.float32)
    got = np.stack([T.from_numpy(a[i].copy()).lerp_(T.from_numpy(b[i]), 0.1).numpy() for i in range(reps)])
    check(f"lerp_ small n={n}", got, one_rounding(al, d, a), two_roundings(al, d, a))
    om = np.full_like(a, np.float32(1) - np.float32(0.7))
    got = np.stack([T.from_numpy(a[i].copy()).lerp_(T.from_numpy(b[i]), 0.7).numpy() for i in range(reps)])
    check(f"lerp_ large n={n}", got, one_rounding(-d, om, b), two_roundings(-d, om, b))
    # mul_(0.9).add_(b): two roundings (what SGD's momentum buffer does)
    got = np.stack([T.from_numpy(a[i].copy()).mul_(0.9).add_(T.from_numpy(b[i])).numpy() for i in range(reps)])
    m = np.full_like(a, np.float32(0.9))
    check(f"mul_().add_() n={n}", got, two_roundings(a, m, b), one_rounding(a, m, b))


def test_division_by_a_python_scalar_is_a_true_division():
    a = np.abs(np.random.default_rng(1).standard_normal(20000)).astype(np.float32)
    c = 0.0316227766
    got = (T.from_numpy(a) / c).numpy()
    assert (got == a / np.float32(c)).all()
    assert (got != a * (np.float32(1) / np.float32(c))).any()  # the reciprocal would differ somewhere


def _cascade(x):
    lp = max(4, (int(len(x) - 1).bit_length() if len(x) > 2 else 1) // 4)
    step, mask = 1 << lp, (1 << lp) - 1
    acc, i = [np.float32(0)] * 4, 0
    while i + step <= len(x):
        for _ in range(step):
            acc[0] = np.float32(acc[0] + x[i])
            i += 1
        for j in range(1, 4):
            acc[j], acc[j - 1] = np.float32(acc[j] + acc[j - 1]), np.float32(0)
            if i & (mask << (j * lp)):
                break
    for v in x[i:]:
        acc[0] = np.float32(acc[0] + v)
    for j in range(1, 4):
        acc[0] = np.float32(acc[0] + acc[j])
    return acc[0]


def _row_sum(x):
    n4 = len(x) // 4
    p = [_cascade(x[k:4 * n4:4]) for k in range(4)]
    for v in x[4 * n4:]:
        p[0] = np.float32(p[0] + v)
    for k in range(1, 4):
        p[0] = np.float32(p[0] + p[k])
    return p[0]


def documented_column_sums(x):
    """dy.sum(0) in the order docs/parity.md documents (and kernels/dense_math.h's torch_column_sum implements)."""
    rows, cols = x.shape
    if cols == 1 and rows >= 8:
        v = rows // 8
        acc = np.float32(0)
        for r in range(8 * v, rows):
            acc = np.float32(acc + x[r, 0])
        for lane in range(8):
            acc = np.float32(acc + _row_sum(x[lane:8 * v:8, 0]))
        return np.array([np.float32(0) + acc], np.float32)
    cascaded = cols // 32 * 32 if cols >= 8 else cols // 4 * 4
    return np.array([np.float32(0) + (_cascade(x[:, j]) if j < cascaded else _row_sum(x[:, j]))
                     for j in range(cols)], np.float32)


def test_sum_over_rows_follows_the_documented_cascade():
    rng = np.random.default_rng(7)
    differs_from_running_sum = 0
    for rows in [1, 3, 5, 8, 16, 17, 32, 33, 100, 257]:
        for cols in [1, 3, 4, 7, 8, 10, 31, 32, 40, 65]:
            x = (rng.standard_normal((rows, cols)) * rng.choice([1, 1e-3, 1e3], (rows, cols))).astype(np.float32)
            got = T.from_numpy(x).sum(0).numpy()
            want = documented_column_sums(x)
            assert (got.view(np.uint32) == want.view(np.uint32)).all(), f"{rows} x {cols}"
            running = np.zeros(cols, np.float32)
            for r in range(rows):
                running = (running + x[r]).astype(np.float32)
            differs_from_running_sum += int((running != got).any())
    assert differs_from_running_sum > 0


def _fma(a, b, c):
    # One rounding: a*b is exact in double, the double sum rounds to float (except at an exact float midpoint).
    return np.float32(np.float64(a) * np.float64(b) + np.float64(c))


def documented_sum_squares(x, contiguous):
    """sum x^2 before torch.linalg.vector_norm's sqrt, in the orders docs/parity.md documents (and
    kernels/compress_math.h's torch_sum_squares implements): strided, one FMA chain; contiguous, 8 FMA lanes added in
    order, then the tail's first group of 4 as rounded squares, the rest by FMA."""
    if not contiguous:
        acc = np.float32(0)
        for v in x:
            acc = _fma(v, v, acc)
        return acc
    n, lanes, i = len(x), [np.float32(0)] * 8, 0
    while i + 8 <= n:
        lanes = [_fma(x[i + l], x[i + l], lanes[l]) for l in range(8)]
        i += 8
    acc = lanes[0]
    for v in lanes[1:]:
        acc = np.float32(acc + v)
    if n - i >= 4:
        for v in x[i:i + 4]:
            acc = np.float32(acc + np.float32(v * v))
        i += 4
    for v in x[i:]:
        acc = _fma(v, v, acc)
    return acc


def test_vector_norm_of_a_column_follows_the_documented_orders():
    # powerSGD_hook's torch.norm(col, dim=1, keepdim=True) on a column of [1, n, r]: contiguous for r = 1 (ATen's
    # last-dim kernel), strided for r = 2 (NormTwoOps).
    rng = np.random.default_rng(17)
    other_order = 0
    for n in list(range(1, 41)) + [64, 100, 101, 1029, 1031]:
        for r in (1, 2):
            for _ in range(6 if n <= 40 else 2):
                a = (rng.standard_normal((1, n, r)) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32)
                got = T.norm(T.from_numpy(a)[:, :, 0:1], dim=1, keepdim=True).item()
                want = np.sqrt(documented_sum_squares(a[0, :, 0], r == 1))
                assert np.float32(got) == want, f"n {n} r {r}"
                other_order += int(np.sqrt(documented_sum_squares(a[0, :, 0], r != 1)) != want)
    assert other_order > 0  # the two orders are told apart by these inputs


def test_small_batched_products_use_atens_own_float_loop():
    # torch.bmm multiplies with a plain float loop (k in order, no FMA) when rows x cols x inner < 400.
    rng = np.random.default_rng(18)
    for n, m, r in [(4, 16, 1), (16, 8, 2), (5, 7, 3), (24, 16, 1)]:
        a = rng.standard_normal((n, m)).astype(np.float32)
        b = rng.standard_normal((m, r)).astype(np.float32)
        got = T.bmm(T.from_numpy(a)[None], T.from_numpy(b)[None])[0].numpy()
        want = np.zeros((n, r), np.float32)
        for i in range(n):
            for j in range(r):
                acc = np.float32(0)
                for k in range(m):
                    acc = np.float32(acc + np.float32(a[i, k] * b[k, j]))
                want[i, j] = acc
        assert (got.view(np.uint32) == want.view(np.uint32)).all(), f"{n} x {m} x {r}"


def documented_gram_schmidt(a, eps):
    """powerSGD_hook's _orthogonalize_gram_schmidt on a [n, r] float32 matrix in the documented orders (what
    kernels/compress_math.h's torch_gram_schmidt computes): col /= norm (+ eps), rest -= sum(col * rest) * col."""
    a = a.copy()
    n, r = a.shape
    for c in range(r):
        norm = np.sqrt(documented_sum_squares(a[:, c], r == 1))
        a[:, c] = a[:, c] / (norm if eps == 0 else np.float32(norm + np.float32(eps)))
        for c2 in range(c + 1, r):
            prod = (a[:, c] * a[:, c2]).astype(np.float32)
            dot = documented_column_sums(prod[:, None])[0]
            a[:, c2] = a[:, c2] - (dot * a[:, c]).astype(np.float32)
    return a


def test_powersgd_gram_schmidt_follows_the_documented_orders():
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psh
    rng = np.random.default_rng(19)
    for n in [1, 2, 4, 5, 12, 13, 16, 37, 64, 100]:
        for r in (1, 2):
            if r > n:
                continue
            for eps in (0.0, 1e-8):
                a = (rng.standard_normal((n, r)) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32)
                t = T.from_numpy(a.copy())[None]
                psh._orthogonalize(t, eps)
                want = documented_gram_schmidt(a, eps)
                assert (t[0].numpy().view(np.uint32) == want.view(np.uint32)).all(), f"n {n} r {r} eps {eps}"
