"""The tuning search of conv2d kernels (BRAZE_TUNE=1, conv_tuning.py): every kernel that covers a conv, timed here.

For each float32 conv2d of a graph (alone or anchoring a fused region) whose shape the table lacks, each covering
kernel (im2col, direct, channels) is compiled alone, as the model compiles it (the weight pre-packed where the
model's is a parameter, a bias and a ReLU in the epilogue), run on random data and timed on one thread by the
thread's CPU time (time.thread_time: another process on the core does not count), the kernels interleaved over
ROUNDS rounds and the best of each kept; the fastest is recorded. A shape only one kernel covers, or one with
nothing to compute (an empty batch or channel count), is not searched. Nothing else runs meanwhile: the search is
part of the compile that asked for it, before any code of the graph is generated.
benchmarks/conv_layers.py times the benchmark CNN's layers with the same compile_layer.
"""
from __future__ import annotations

import ctypes
import time
from typing import Callable

import numpy as np

from braze.ir.graph import Graph, Node, Value
from braze.ir.registry import is_leaf

from . import conv_tuning
from .abi import SHARE_AREA, SHARE_OFFSET
from .conv import ConvSpec, conv2d_scratch_bytes, conv2d_shared_bytes, conv_kernel, conv_weight_floats, emit_conv2d, \
    emit_conv_weight_prepack
from .gemm import bias_rows, chain, relu, tiling_for
from .jit import compile_ir
from .target import Target, host_target

ROUNDS = 5
ROUND_FLOPS = 2e8  # each timing repeats the conv for about this many FLOPs (a few milliseconds),
MOST_REPS = 1000   # but at most this many times: a tiny conv's call is mostly the call


def _aligned(count: int) -> np.ndarray:
    """A 64-byte-aligned float32 array of `count` zeros."""
    raw = np.zeros(count + 16, np.float32)
    start = (-raw.ctypes.data % 64) // 4
    return raw[start:start + count]


def compile_layer(spec: ConvSpec, kernel: str, target: Target | None = None) -> Callable[[int], Callable[[int], None]]:
    """A factory: threads -> a call of `spec` on `kernel` (the call takes the thread index; buffers allocated once,
    random input and weight, the weight packed as the kernel reads it)."""
    target = target or host_target()
    tiling = tiling_for(target.vector_width, cpu=target.cpu)
    name = f"tune_conv_{kernel}"
    module = target.new_module(name)
    emit_conv2d(module, name, spec, tiling, chain(bias_rows(0), relu), 1, kernel=kernel)
    if spec.prepacked_weight:
        emit_conv_weight_prepack(module, name + "_pack", spec, tiling, kernel)
    library = compile_ir(module, use_cache=False)
    rng = np.random.default_rng(0)
    x = _aligned(int(np.prod(spec.input_shape)))
    x[:] = rng.standard_normal(x.size)
    w = _aligned(int(np.prod(spec.weight_shape)))
    w[:] = rng.standard_normal(w.size)
    if spec.prepacked_weight:
        packed = _aligned(conv_weight_floats(spec, tiling, kernel))
        library.cfunc(name + "_pack", None, ctypes.c_void_p, ctypes.c_void_p)(w.ctypes.data, packed.ctypes.data)
        w = packed
    bias = _aligned(spec.c_out)
    out = _aligned(int(np.prod(spec.out_shape)))
    fn = library.cfunc(name, None, *(ctypes.c_void_p,) * 4, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_void_p)
    scratch_floats = max(conv2d_scratch_bytes(spec, tiling, kernel) // 4, 1)
    area = _aligned(max(conv2d_shared_bytes(spec, tiling, kernel) // 4, 1))

    def on(threads: int) -> Callable[[int], None]:
        scratch = [_aligned(scratch_floats) for _ in range(threads)]
        claim, share = _aligned(16), _aligned(16).view(np.uint64)  # claim words; share words and the area's address
        share[(SHARE_AREA - SHARE_OFFSET) // 8] = area.ctypes.data

        def call(tid: int) -> None:
            fn(x.ctypes.data, w.ctypes.data, out.ctypes.data, scratch[tid].ctypes.data, tid, threads,
               claim.ctypes.data, share.ctypes.data, bias.ctypes.data)
        return call
    return on


def candidates(spec: ConvSpec, width: int) -> list[str]:
    """The kernels of conv_tuning.KERNEL_NAMES that cover `spec` at `width` lanes."""
    tiling = tiling_for(width)
    found = []
    for kernel in conv_tuning.KERNEL_NAMES:
        try:
            if conv_kernel(spec, kernel, tiling) == kernel:
                found.append(kernel)
        except ValueError:  # the kernel does not cover the shape
            pass
    return found


def search(spec: ConvSpec, target: Target | None = None) -> dict[str, float]:
    """Seconds per call of each covering kernel on one thread (the best of ROUNDS interleaved rounds)."""
    target = target or host_target()
    calls = {kernel: compile_layer(spec, kernel, target)(1) for kernel in candidates(spec, target.vector_width)}
    reps = max(1, min(MOST_REPS, int(ROUND_FLOPS // max(spec.flops, 1))))
    best = dict.fromkeys(calls, float("inf"))
    for call in calls.values():
        call(0)  # the first call faults the buffers in
    for _ in range(ROUNDS):
        for kernel, call in calls.items():
            start = time.thread_time()
            for _ in range(reps):
                call(0)
            best[kernel] = min(best[kernel], (time.thread_time() - start) / reps)
    return best


def graph_convs(graph: Graph) -> list[ConvSpec]:
    """The distinct float32 conv2d shapes of a graph's nodes and fused regions, as the lowering builds them (the
    weight pre-packed where it is a parameter or a constant)."""
    producers = graph.producers
    found: dict[ConvSpec, None] = {}
    for node in graph.nodes:
        anchor, operands = _conv_anchor(node)
        if anchor is None or anchor.out.dtype.name != "f32":
            continue
        x, w = anchor.inputs[:2]
        weight = operands.get(w.name, w)
        source = producers.get(weight.name)
        attrs = anchor.attr
        spec = ConvSpec(*x.shape, w.shape[0], w.shape[2], w.shape[3], attrs["stride"], attrs["padding"],
                        attrs["dilation"], attrs["groups"],
                        prepacked_weight=source is not None and source.op in ("param", "constant"))
        if not spec.depthwise:
            found[spec] = None
    return list(found)


def _conv_anchor(node: Node) -> tuple[Node | None, dict[str, Value]]:
    """The conv2d a node computes (itself, or its fused region's anchor) and the region's inputs by body name."""
    if node.op == "conv2d":
        return node, {}
    if node.op != "fused" or node.attr.get("kind") != "conv":
        return None, {}
    body: Graph = node.attr["body"]
    anchor = next((n for n in body.nodes if not is_leaf(n)), None)
    if anchor is None or anchor.op != "conv2d":
        return None, {}
    return anchor, {v.name: outer for v, outer in zip(body.inputs, node.inputs)}


def tune(graph: Graph, target: Target | None = None) -> dict[str, str]:
    """Search every conv of `graph` the table lacks and record the winners; returns {spec key: kernel} of the shapes
    searched now."""
    target = target or host_target()
    width, identity = target.vector_width, target.identity
    known = conv_tuning.entries(identity)
    chosen = {}
    for spec in graph_convs(graph):
        key = conv_tuning.spec_key(spec, width)
        if key in known or spec.flops == 0 or len(candidates(spec, width)) < 2:
            continue
        chosen[key] = conv_tuning.record(spec, width, identity, search(spec, target))
    return chosen


__all__ = ["ROUNDS", "candidates", "compile_layer", "graph_convs", "search", "tune"]
