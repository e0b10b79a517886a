"""Models and file surgery shared by the artifact tests: a LoRA MLP with trained-looking adapters, a batch-norm CNN,
and rewriting an exported file's graph, manifest or tensors with a recomputed content hash (what a deliberate
tamperer would do), so each structural check is reached past the hash."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

import braze
import braze.nn as nn
from braze.frontend.safetensors_io import decode, encode
from braze.runtime import artifact


def lora_mlp(seed: int = 0) -> nn.Module:
    """Linear-ReLU-Linear with rank-2 LoRA adapters whose B is not zero, in eval mode."""
    braze.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).apply_lora(nn.Lora(rank=2, alpha=4))
    rng = np.random.default_rng(seed + 1)
    for path, p in model.named_parameters():
        if path.endswith("lora_b"):
            p.assign(rng.standard_normal(p.shape).astype(np.float32) * 0.5)
    return model.eval()


def bn_cnn(seed: int = 0) -> nn.Module:
    """Conv-BatchNorm-ReLU and a linear head, with non-trivial running statistics, in eval mode."""
    braze.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 5 * 5, 2))
    rng = np.random.default_rng(seed + 2)
    bn = model[1]
    bn.running_mean.assign(rng.standard_normal(4).astype(np.float32) * 0.1)
    bn.running_var.assign(rng.uniform(0.5, 1.5, 4).astype(np.float32))
    return model.eval()


def inputs(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def parts(path: Path) -> tuple[dict[str, np.ndarray], str, dict[str, Any]]:
    """The tensors, IR text and manifest of an artifact file."""
    tensors, metadata = decode(path.read_bytes(), str(path))
    return tensors, metadata[artifact.GRAPH_KEY], json.loads(metadata[artifact.MANIFEST_KEY])


def rewrite(path: Path, out: Path, *, tensors: Callable[[dict], dict] = lambda t: t,
            graph: Callable[[str], str] = lambda g: g, manifest: Callable[[dict], dict] = lambda m: m,
            rehash: bool = True) -> Path:
    """Write `out`: the artifact at `path` with its tensors, IR text and manifest changed, the hash recomputed."""
    old_tensors, old_graph, old_manifest = parts(path)
    new_tensors, new_graph, new_manifest = tensors(dict(old_tensors)), graph(old_graph), manifest(dict(old_manifest))
    if rehash:
        new_manifest["content_hash"] = artifact.content_hash(new_graph, new_manifest, new_tensors)
    metadata = {"format": artifact.FORMAT, artifact.GRAPH_KEY: new_graph,
                artifact.MANIFEST_KEY: json.dumps(new_manifest)}
    out.write_bytes(encode(new_tensors, metadata))
    return out


def crafted(out: Path, ir_text: str, tensors: dict[str, np.ndarray]) -> Path:
    """A well-formed artifact (correct manifest and hash) of hand-written IR text, for hostile graphs."""
    graph = braze.ir.parse(ir_text)
    metadata = artifact.pack(graph.replace(weights=tensors), [], [], braze.__version__)[1]
    out.write_bytes(encode(tensors, metadata))
    return out
