"""What braze.trace captures from Python: parameters however the forward code reads them, constants, guards
on flag and mode reads, buffer assignments, several outputs, functions and bound methods, input names."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze import ir

X = braze.tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))


def _init(m: nn.Module) -> nn.Module:
    m.state_dict()  # initialize lazy parameters
    return m


def _ops(g: ir.Graph) -> list[str]:
    return [n.op for n in g.ops()]


class TiedReads(nn.Module):
    """One weight read three ways: as an attribute in an expression, through F.linear, through .T."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Param(braze.randn(4, 4))

    def forward(self, x: Any) -> Any:
        return F.linear(x, self.weight) + x @ self.weight.T + braze.matmul(x, braze.t(self.weight))


def test_trace_a_parameter_read_many_ways_is_one_leaf() -> None:
    m = TiedReads()
    g = braze.trace(m, X)
    assert [(p.path, p.id) for p in g.params()] == [("weight", int(m.weight.id))]
    assert np.array_equal(ir.interpret(g, [X.numpy()])[0], m(X).detach().numpy())


def test_trace_a_module_shared_by_two_parents_reads_its_parameters_once() -> None:
    shared = nn.Linear(4, 4)
    m = _init(nn.Sequential(shared, nn.ReLU(), shared))
    g = braze.trace(m, X)
    assert [p.path for p in g.params()] == ["0.weight", "0.bias"]
    assert _ops(g).count("matmul") == 2


class WithConstants(nn.Module):
    """Python numbers and a numpy array captured from the forward code."""

    def __init__(self) -> None:
        super().__init__()
        self.offsets = np.arange(4, dtype=np.float32)

    def forward(self, x: Any) -> Any:
        return (x + self.offsets) * 0.5 - braze.tensor([1.0, 2.0, 3.0, 4.0])


def test_trace_python_numbers_and_arrays_become_constant_nodes() -> None:
    g = braze.trace(WithConstants(), X)
    constants = [n.attr["value"].array for n in g.nodes if n.op == "constant"]
    assert any(np.array_equal(c, np.arange(4, dtype=np.float32)) for c in constants)
    assert any(c.shape == () and c == np.float32(0.5) for c in constants)
    assert any(np.array_equal(c, np.array([1, 2, 3, 4], dtype=np.float32)) for c in constants)
    assert all(c.dtype == np.float32 for c in constants)
    assert np.array_equal(ir.interpret(g, [X.numpy()])[0], WithConstants()(X).numpy())


def test_trace_ops_on_constants_alone_fold_to_one_constant() -> None:
    g = braze.trace(lambda x: x + braze.ones(4) * 3.0, X)
    assert _ops(g) == ["add"]
    folded = next(n for n in g.nodes if n.op == "constant").attr["value"].array
    assert np.array_equal(folded, np.full(4, 3.0, dtype=np.float32))


def test_trace_dropout_seed_is_a_constant_that_repeats_the_eager_mask() -> None:
    m = nn.Dropout(0.5)
    x = braze.ones(64)
    braze.manual_seed(3)
    g = braze.trace(m, x)
    seed = next(n for n in g.nodes if n.op == "constant" and n.out.type.dtype == ir.int64)
    braze.manual_seed(3)
    assert np.array_equal(ir.interpret(g, [x.numpy()])[0], m(x).numpy())
    assert seed.out in next(n for n in g.nodes if n.op == "dropout").inputs


class FlagBranch(nn.Module):
    """Python branches on a flag's value and on a flagless module's mode."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.body = nn.Sequential(nn.Linear(4, 4))

    def forward(self, x: Any) -> Any:
        if self.drop.training:  # reads the flag drop.training
            x = x * 2.0
        if bool(self.drop.flag("training")):
            x = x + 1.0
        return self.body(x) if self.body.training else x


def test_trace_branching_on_flags_records_guards() -> None:
    m = _init(FlagBranch())
    g = braze.trace(m, X)
    assert g.attributes["guards"] == {"drop.training": True, "body.training": True}
    assert _ops(g) == ["mul", "add", "transpose", "matmul", "add"]
    assert ir.parse(str(g)) == g


def test_trace_guards_specialize_to_the_traced_mode() -> None:
    m = _init(FlagBranch()).eval()
    g = braze.trace(m, X)
    assert g.attributes["guards"] == {"drop.training": False, "body.training": False}
    assert _ops(g) == [] and g.outputs == g.inputs


def test_trace_without_python_branches_records_no_guards() -> None:
    m = _init(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1)))
    assert "guards" not in braze.trace(m, X).attributes


class Counter(nn.Module):
    """A buffer assigned twice in forward; the second read sees the first assignment."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", braze.zeros(()))

    def forward(self, x: Any) -> Any:
        self.count.assign(self.count + 1.0)
        self.count.assign(self.count * 10.0)
        return x * self.count


def test_trace_buffer_assignments_become_one_update_output_and_later_reads_see_them() -> None:
    m = Counter()
    g = braze.trace(m, X)
    assert g.attributes["outputs"] == ("output", "buffer_update:count")
    out, count = ir.interpret(g, [X.numpy()])
    assert count == np.float32(10.0) and np.array_equal(out, X.numpy() * np.float32(10.0))
    assert m.count.val().numpy() == 0.0


class AssignsParam(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Param(braze.ones(4))

    def forward(self, x: Any) -> Any:
        self.weight.assign(self.weight * 2.0)
        return x


def test_trace_assigning_a_parameter_in_forward_is_an_error() -> None:
    with pytest.raises(braze.TraceError, match="assigns to parameter 'weight'"):
        braze.trace(AssignsParam(), X)


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 2), nn.Linear(4, 3)

    def forward(self, x: Any) -> Any:
        return self.a(x), [self.b(x), None]


def test_trace_tuple_and_list_results_flatten_and_none_is_dropped() -> None:
    m = _init(TwoHeads())
    g = braze.trace(m, X)
    assert [v.type for v in g.outputs] == [ir.TensorType((3, 2), ir.float32), ir.TensorType((3, 3), ir.float32)]
    assert g.attributes["outputs"] == ("output", "output")


def test_trace_a_function_sees_closed_over_tensors_as_constants() -> None:
    w = braze.randn(4, 2)

    def project(x: Any) -> Any:
        return x @ w

    g = braze.trace(project, X)
    assert g.name == "project" and g.params() == []
    assert np.array_equal(ir.interpret(g, [X.numpy()])[0], project(X).numpy())


def test_trace_a_bound_method_of_a_module_gets_its_param_leaves() -> None:
    m = _init(nn.Linear(4, 2))
    g = braze.trace(m.forward, X)
    assert [p.path for p in g.params()] == ["weight", "bias"]


def test_trace_names_inputs_after_forward_parameters() -> None:
    m = _init(nn.MultiheadAttention(4, 2, batch_first=True))
    q = braze.randn(2, 3, 4)
    g = braze.trace(m, q, braze.randn(2, 5, 4), braze.randn(2, 5, 4), name="attention")
    assert [v.name for v in g.inputs] == ["query", "key", "value"]
    assert g.name == "attention" and len(g.outputs) == 2


def test_trace_accepts_numpy_example_inputs_with_their_dtype() -> None:
    g = braze.trace(lambda a, b: a * b, np.ones((2, 2)), np.ones((2, 2)))
    assert [v.type for v in g.inputs] == [ir.TensorType((2, 2), ir.float64)] * 2
    assert g.name == "lambda"


def test_traced_tensors_report_shape_dtype_and_device() -> None:
    seen = {}

    def probe(x: Any) -> Any:
        seen.update(shape=x.shape, dtype=x.dtype, ndim=x.ndim, numel=x.numel(), device=x.device, size=x.size(-1))
        return x.float()

    braze.trace(probe, braze.zeros(2, 3, dtype=braze.float64))
    assert seen == {"shape": (2, 3), "dtype": braze.float64, "ndim": 2, "numel": 6, "device": braze.Device("cpu"),
                    "size": 3}


def test_traced_in_place_updates_rebind_the_value() -> None:
    def update(x: Any) -> Any:
        y = x * 1.0
        y.copy_(x + 1.0)
        y.zero_()
        return y + x

    g = braze.trace(update, X)
    assert np.array_equal(ir.interpret(g, [X.numpy()])[0], X.numpy())


def test_trace_graph_summary_counts_ops_and_parameters() -> None:
    m = _init(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.BatchNorm1d(2)))
    summary = braze.trace(m, X).summary()
    assert "parameters: 6 tensors, 62 values; buffers: 3" in summary
    assert "matmul" in summary and "batch_norm_flag  1" in summary


def test_trace_interpret_params_override_the_captured_weights() -> None:
    m = _init(nn.Linear(4, 2))
    g = braze.trace(m, X)
    zero = {"weight": np.zeros((2, 4), np.float32), "bias": np.ones(2, np.float32)}
    assert np.array_equal(ir.interpret(g, [X.numpy()], params=zero)[0], np.ones((3, 2), np.float32))


def test_trace_leaves_no_interceptor_or_watcher_behind_after_an_error() -> None:
    from braze.frontend.trace_context import TRACE

    def bad(x: Any) -> Any:
        return x.item()

    with pytest.raises(braze.TraceError):
        braze.trace(bad, X)
    assert TRACE.interceptor is None and TRACE.watcher is None and TRACE.entries == []
