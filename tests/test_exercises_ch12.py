"""Chapter 12's checker (12.1, learner-style wrong solutions named), the backward tile schedule and its figure."""

import numpy as np
import pytest
from helpers import checker_tests

import flashmath as fm
from flashmath.exercises import chapter12 as ex
from flashmath.exercises import check_backward_tiles
from flashmath.triton_backward import backward_schedule
from flashmath.viz.backward import BackwardSweepPlot


def solution(*args):
    from flashmath import solutions_triton

    return solutions_triton.backward_tiles(*args)


def learner(
    *,
    forget_delta=False,
    overwrite_dq=False,
    no_mask=False,
    no_scale_dk=False,
    tile_softmax=False,
    d_from_q=False,
    d_plus=False,
    d_per_tile=False,
    exp_over_exp=False,
    times_keep=False,
    x_unscaled=False,
    dv_scaled=False,
    short_tiles=False,
    full_tiles_only=False,
    d_total=False,
    dx_scaled=False,
    sqrt_d=False,
    ignore_keep=False,
    scale_one_over_d=False,
    guard_then_ignore_keep=False,
    x_masked_to_minus_inf=False,
    end_clipped_then_minus_one=False,
    no_parens=False,
    dq_from_values=False,
):
    """A learner's tiled backward, written from scratch, with one slip switched on."""

    def fn(q, k, v, a, lse, grad_a, keep, block_k):
        scale = 1 / q.shape[1] if scale_one_over_d else q.shape[1] ** -0.5  # "scaled by the dimension"
        rows_ok = np.isfinite(lse)[:, None]
        d = (grad_a * (q if d_from_q else a)).sum(1, keepdims=True) * (not forget_delta)
        if d_total:  # "D = sum(dA * A)"
            d = np.full((len(q), 1), np.sum(grad_a * a))
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        stop = len(k) - len(k) % block_k if full_tiles_only else len(k)
        for c in range(0, stop, block_k):
            sl = slice(c, c + block_k - 1) if short_tiles else slice(c, c + block_k)
            if end_clipped_then_minus_one:  # "c1 is the last key of the tile"
                sl = slice(c, min(c + block_k, len(k)) - 1)
            ok = rows_ok & (True if no_mask else keep[:, sl])
            x = q @ k[sl].T * (1 if x_unscaled else scale)
            if tile_softmax:
                e = np.exp(x - x.max(1, keepdims=True)) * ok
                y = e / np.maximum(e.sum(1, keepdims=True), 1e-300)
            elif exp_over_exp:
                y = np.where(ok, np.exp(x) / np.exp(np.where(ok, lse[:, None], 0)), 0)
            elif times_keep:
                y = np.exp(x - lse[:, None]) * keep[:, sl]
            elif ignore_keep:
                y = np.exp(x - lse[:, None])
            elif guard_then_ignore_keep:  # L = 0 on a row with no key, then no mask at all
                y = np.exp(x - np.where(np.isneginf(lse), 0, lse)[:, None])
            elif x_masked_to_minus_inf:  # "masked scores are -inf, so exp gives 0"
                with np.errstate(invalid="ignore"):
                    y = np.exp(np.where(keep[:, sl], x, -np.inf) - lse[:, None])
            else:
                y = np.where(ok, np.exp(np.where(ok, x - lse[:, None], 0)), 0)
            dy = grad_a @ v[sl].T
            if d_per_tile:
                d = (dy * y).sum(1, keepdims=True)
            dx = y * (dy + d) if d_plus else y * dy - d if no_parens else y * (dy - d)
            if x_masked_to_minus_inf:
                dx = np.where(keep[:, sl], dx, 0)
            if dx_scaled:  # "the scale of X carries over to dX"
                dx = dx * scale
            dv[sl] = y.T @ grad_a * (scale if dv_scaled else 1)
            g_scale = q.shape[1] ** 0.5 if sqrt_d else scale  # sqrt_d: "the scale is sqrt(D)"
            dk[sl] = dx.T @ q * (1 if no_scale_dk else g_scale)
            k_or_v = v[sl] if dq_from_values else k[sl]  # dq_from_values: "dQ from the tile's V"
            dq = dq + dx @ k_or_v * g_scale if not overwrite_dq else dx @ k_or_v * g_scale
        return dq, dk, dv

    return fn


def scale_missing_from_dq(q, k, v, a, lse, grad_a, keep, block_k):
    dq, dk, dv = solution(q, k, v, a, lse, grad_a, keep, block_k)
    return dq * np.sqrt(q.shape[1]), dk, dv  # dQ without its factor 1/sqrt(D)


def scale_missing_from_dq_and_dk(q, k, v, a, lse, grad_a, keep, block_k):
    dq, dk, dv = solution(q, k, v, a, lse, grad_a, keep, block_k)
    return dq * np.sqrt(q.shape[1]), dk * np.sqrt(q.shape[1]), dv  # neither dQ nor dK has its 1/sqrt(D)


WRONG = {
    "check_backward_tiles": {
        "Delta forgotten": learner(forget_delta=True),
        "Y not recomputed from the logsumexp": learner(tile_softmax=True),
        "Delta from the wrong arrays": learner(d_from_q=True),
        "Delta with the wrong sign": learner(d_plus=True),
        "Delta computed per key tile": learner(d_per_tile=True),
        "dX = Y * dY - Delta (the parentheses missing)": learner(no_parens=True),
        "dQ from the values": learner(dq_from_values=True),
        "exp(X) / exp(L) instead of exp(X - L)": learner(exp_over_exp=True),
        "NaN on a fully masked row": learner(times_keep=True),
        "a wrong scale in X": learner(x_unscaled=True),
        "the scale in dV": learner(dv_scaled=True),
        "tile bounds one off": learner(short_tiles=True),
        "the last, shorter tile skipped": learner(full_tiles_only=True),
        "a transpose wrong": lambda *args: ex._model(*args, transpose=True),
        "the scale missing from dQ": scale_missing_from_dq,
        "the scale missing from dK": learner(no_scale_dk=True),
        "the scale missing from both dQ and dK": scale_missing_from_dq_and_dk,
        "dQ not accumulated across key tiles": learner(overwrite_dq=True),
        "gradients leaking into masked keys": learner(no_mask=True),
        "Delta summed over the whole array": learner(d_total=True),
        "the scale applied twice": learner(dx_scaled=True),
        "sqrt(D) instead of 1/sqrt(D)": learner(sqrt_d=True),
        "the scale 1/D instead of 1/sqrt(D)": learner(scale_one_over_d=True),
        "not (dq, dk, dv)": lambda *args: solution(*args)[:2],
        "the input modified in place": lambda *args: in_place(*args),
        "an answer of the wrong shape": lambda *args: tuple(g[None] for g in solution(*args)),
    }
}


def in_place(q, k, v, a, lse, grad_a, keep, block_k):
    grads = solution(q, k, v, a, lse, grad_a, keep, block_k)
    grad_a *= 0  # "done with it": the caller's dA cleared
    return grads


def test_a_broadcast_error_is_explained():
    def no_keepdims(q, k, v, a, lse, grad_a, keep, block_k):
        d = (grad_a * a).sum(1)  # (N,), not (N, 1)
        y = np.exp(q @ k.T / np.sqrt(q.shape[1]) - lse[:, None])
        return y * (grad_a @ v.T - d), None, None

    text = repr(check_backward_tiles(no_keepdims))
    assert "raised ValueError" in text and "[:, None]" in text, text


test_each_mistake_is_caught_and_named, test_every_mistake_in_the_catalogue_has_a_wrong_solution = checker_tests(WRONG)


def test_the_mask_ignored_everywhere_is_named():
    report = check_backward_tiles(learner(ignore_keep=True))
    assert not report.passed and "looks like gradients leaking into masked keys" in str(report), report


@pytest.mark.parametrize(
    "fn, name",
    [
        (learner(guard_then_ignore_keep=True), "gradients leaking into masked keys"),
        (learner(x_masked_to_minus_inf=True), "NaN on a fully masked row"),
        (learner(end_clipped_then_minus_one=True), "tile bounds one off"),
    ],
)
def test_other_forms_of_a_mistake_are_named(fn, name):
    report = check_backward_tiles(fn)
    assert not report.passed and f"looks like {name}" in str(report), report


def test_wrong_transpose_and_wrong_form_are_named():
    report = check_backward_tiles(lambda *args: ex._model(*args, transpose=True))
    assert "a transpose wrong" in repr(report)
    report = check_backward_tiles(lambda *args: solution(*args)[:2])
    assert "not (dq, dk, dv)" in repr(report)


def test_schedule_visits_every_attended_pair_once_per_kernel():
    for N, M, causal in ((64, 48, True), (40, 70, True), (33, 33, False)):
        steps = backward_schedule(N, M, 16, 16, causal=causal)
        atomic = backward_schedule(N, M, 16, 16, causal=causal, dq_mode="atomic")
        dkdv = {(i, j) for kernel, i, j in steps if kernel == "dkdv"}
        dq = {(i, j) for kernel, i, j in steps if kernel == "dq"}
        assert dkdv == dq and len(dkdv) == len(atomic)
        rows, cols = np.arange(N)[:, None], np.arange(M)[None, :]
        keep = (cols <= rows + M - N) if causal else np.ones((N, M), bool)
        needed = {(n // 16, m // 16) for n, m in zip(*np.nonzero(keep), strict=True)}
        assert needed <= dkdv  # every pair with an attended element is visited
    assert len(backward_schedule(64, 64, 16, 16, causal=True)) < len(backward_schedule(64, 64, 16, 16))
    with pytest.raises(ValueError, match="dq_mode"):
        backward_schedule(4, 4, 2, 2, dq_mode="fast")


def test_sweep_plot_updates_and_checks_its_step():
    plot = BackwardSweepPlot(64, 48, causal=True)
    first = plot.rgb().copy()
    assert not np.array_equal(first, plot.update(step=len(plot) - 1).rgb())
    plot.update(step=len(plot) - 1, dq_mode="atomic")  # past the shorter atomic sweep: its last step
    with pytest.raises(ValueError, match="step"):
        plot.update(step=len(plot))


def test_the_numpy_backward_reads_line_for_line_beside_the_kernels():
    from flashmath.triton_backward import BACKWARD_RULES, backward_line_for_line

    rows = backward_line_for_line()
    assert [rule for rule, _, _ in rows] == list(BACKWARD_RULES)
    for rule, numpy_lines, triton_lines in rows:
        assert numpy_lines and triton_lines, rule
        assert any("np." in line or "weighted_values" in line for line in numpy_lines), (rule, numpy_lines)
        assert any("tl." in line for line in triton_lines), (rule, triton_lines)
        # the same names on both sides: the tile or accumulator the rule updates
        name = {
            "X_ij": "x_tile",
            "Y_ij": "y_tile",
            "dV_j": "dv_acc",
            "dY_ij": "dy_tile",
            "dX_ij": "dx_tile",
            "dK_j": "dk",
            "dQ_i": "dq",
        }.get(rule.split()[0])
        if name is not None:
            assert numpy_lines[0].startswith(name) and triton_lines[0].startswith(name), (
                rule,
                numpy_lines,
                triton_lines,
            )


# ------------------------------------------------------------------------------------------------------------------
# Right answers pass: the package's backward, the chapter's own tile function, equivalent forms
# ------------------------------------------------------------------------------------------------------------------


def package_backward(dq_mode):
    def fn(q, k, v, a, lse, grad_a, keep, block_k):
        return fm.attention_backward(q, k, v, a, lse, grad_a, mask=keep, block_k=block_k, dq_mode=dq_mode)

    return fn


def with_the_chapters_backward_tile(q, k, v, a, lse, grad_a, keep, block_k):
    """The loop around the package's backward_tile (the chapter's "five lines"), D once before the tiles."""
    from flashmath.backward import backward_tile

    scale = 1 / np.sqrt(q.shape[1])
    delta = np.einsum("nd,nd->n", grad_a, a)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for c0 in range(0, len(k), block_k):
        c1 = min(c0 + block_k, len(k))
        live = keep[:, c0:c1] & ~np.isneginf(lse)[:, None]
        y, dx = backward_tile(q, k[c0:c1], v[c0:c1], grad_a, lse, delta, live, scale)
        dv[c0:c1], dk[c0:c1] = y.T @ grad_a, scale * dx.T @ q
        dq += scale * dx @ k[c0:c1]
    return dq, dk, dv


def key_by_key(q, k, v, a, lse, grad_a, keep, block_k):
    """One key at a time (any tiling gives the same sums), Y from exp(X - L) with the empty rows' L replaced by 0,
    D as a dot product per row."""
    N, D = q.shape
    dq, dk, dv = np.zeros((N, D)), np.zeros(k.shape), np.zeros(v.shape)
    d_row = np.array([grad_a[n] @ a[n] for n in range(N)])
    safe_lse = np.where(np.isneginf(lse), 0.0, lse)
    for m in range(len(k)):
        x = q @ k[m] / np.sqrt(D)  # (N,)
        y = np.where(keep[:, m] & np.isfinite(lse), np.exp(x - safe_lse), 0.0)
        dx = y * (grad_a @ v[m] - d_row)
        dv[m], dk[m] = y @ grad_a, dx @ q / np.sqrt(D)
        dq += np.outer(dx, k[m]) / np.sqrt(D)
    return dq, dk, dv


@pytest.mark.parametrize(
    "fn",
    [
        solution,
        package_backward("atomic"),
        package_backward("separate"),
        with_the_chapters_backward_tile,
        key_by_key,
        learner(),
    ],
    ids=[
        "solution",
        "fm.attention_backward",
        "fm.attention_backward separate",
        "backward_tile",
        "key by key",
        "learner",
    ],
)
def test_right_answers_pass(fn):
    report = check_backward_tiles(fn)
    assert report.passed, report
