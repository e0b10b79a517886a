"""Every registered op: samples exist, inference agrees with the reference, VJPs match finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from braze import ir
from braze.ir.evaluate import evaluate, vjp_numpy

from .samples import Sample, all_samples

SAMPLES = all_samples()
LEAVES = ir.registry.leaf_ops()
FD_EPS = 1e-6


def _ids(samples: list[Sample]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for s in samples:
        n = seen.get(s.id, 0)
        seen[s.id] = n + 1
        out.append(s.id if n == 0 else f"{s.id}#{n}")
    return out


@pytest.mark.parametrize("name", sorted(set(ir.op_names()) - LEAVES))
def test_every_op_has_a_sample(name: str) -> None:
    assert any(s.op == name for s in SAMPLES), f"no sample exercises op {name}"


@pytest.mark.parametrize("name", sorted(ir.op_names()))
def test_every_op_has_rules(name: str) -> None:
    op = ir.get_op(name)
    assert callable(op.impl)
    assert op.infer is not None or name in LEAVES
    assert op.category in ("leaf", "random") or op.vjp is not None or name in NON_DIFFERENTIABLE, \
        f"{name} has no vjp rule and is not declared non-differentiable"


# Ops whose outputs are piecewise constant or integer: no gradient flows through them. Fusion regions are formed
# for inference only, so they have no VJP either.
NON_DIFFERENTIABLE = {"eq", "ne", "lt", "le", "gt", "ge", "argmax", "argmin", "one_hot", "dequantize",
                      "fused"}


@pytest.mark.parametrize("sample", SAMPLES, ids=_ids(SAMPLES))
def test_inference_agrees_with_reference(sample: Sample) -> None:
    op = ir.get_op(sample.op)
    attrs = op.check_attrs(sample.attrs)
    arrays = [np.asarray(a) for a in sample.args]
    inferred = op.infer_types([ir.type_of(a) for a in arrays], attrs)
    raw = op.run(arrays, attrs)
    assert len(raw) == len(inferred) == op.num_results
    for r, t in zip(raw, inferred):
        assert np.asarray(r).shape == t.shape
        assert np.asarray(r).dtype == t.dtype.numpy, f"reference gives {np.asarray(r).dtype}, inference {t}"


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.expected is not None],
                         ids=_ids([s for s in SAMPLES if s.expected is not None]))
def test_reference_matches_independent_numpy(sample: Sample) -> None:
    got = evaluate(sample.op, sample.args, sample.attrs)
    want = sample.expected(*sample.args)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12, atol=1e-12)


def _grad_samples() -> list[Sample]:
    out = []
    for s in SAMPLES:
        op = ir.get_op(s.op)
        outs = evaluate(s.op, s.args, s.attrs)
        if op.vjp is None or not all(o.dtype == np.float64 for o in outs):
            continue
        out.append(s)
    return out


GRAD_SAMPLES = _grad_samples()


def _checked_args(sample: Sample) -> list[int]:
    if sample.grad_args is not None:
        return list(sample.grad_args)
    return [i for i, a in enumerate(sample.args) if np.asarray(a).dtype == np.float64]


@pytest.mark.parametrize("sample", GRAD_SAMPLES, ids=_ids(GRAD_SAMPLES))
def test_vjp_matches_finite_differences(sample: Sample) -> None:
    args = [np.array(a, copy=True) for a in sample.args]
    outs = evaluate(sample.op, args, sample.attrs)
    r = np.random.default_rng(123)
    cotangents = [r.standard_normal(o.shape) for o in outs]

    def objective(values: list[np.ndarray]) -> float:
        res = evaluate(sample.op, values, sample.attrs)
        return float(sum(np.sum(o * c) for o, c in zip(res, cotangents)))

    ct = cotangents[0] if len(outs) == 1 else tuple(cotangents)
    grads = vjp_numpy(sample.op, ct, args, sample.attrs)
    assert len(grads) == len(args)
    for i in _checked_args(sample):
        fd = np.zeros_like(args[i])
        flat, fd_flat = args[i].reshape(-1), fd.reshape(-1)
        for k in range(flat.size):
            keep = flat[k]
            flat[k] = keep + FD_EPS
            up = objective(args)
            flat[k] = keep - FD_EPS
            down = objective(args)
            flat[k] = keep
            fd_flat[k] = (up - down) / (2 * FD_EPS)
        assert grads[i] is not None, f"operand {i} got no gradient"
        assert grads[i].shape == args[i].shape
        np.testing.assert_allclose(grads[i], fd, rtol=1e-6, atol=1e-7, err_msg=f"operand {i}")


PACKED = [s for s in SAMPLES if s.op in ("quantized_linear", "quantized_matmul")]


@pytest.mark.parametrize("sample", PACKED, ids=_ids(PACKED))
def test_packed_product_vjp_multiplies_by_the_dequantized_weight(sample: Sample) -> None:
    """float32 results, which finite differences cannot check: the gradient of x @ W^T is g @ W and that of g @ W
    is h @ W^T (each op's VJP the other op, reading the same packed codes), to float32 rounding; none reaches the
    codes or scales."""
    x, codes, scales = sample.args
    weight = evaluate("dequantize", [codes, scales], sample.attrs)[0].astype(np.float64)
    out = evaluate(sample.op, sample.args, sample.attrs)[0]
    cotangent = np.random.default_rng(5).standard_normal(out.shape).astype(np.float32)
    grads = vjp_numpy(sample.op, cotangent, sample.args, sample.attrs)
    want = cotangent @ (weight if sample.op == "quantized_linear" else weight.T)
    assert grads[1:] == (None, None)
    np.testing.assert_allclose(grads[0], want, rtol=1e-5, atol=1e-5)
