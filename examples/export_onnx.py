"""Export a model's merged inference graph as an ONNX file and run it in onnxruntime.

1. A small CNN with batch norm, its convolutions and classifier adapted with LoRA (non-zero adapters, as after
   fine-tuning).
2. `braze.export_onnx(model, path, x)` traces the evaluation snapshot, merges the LoRA adapters, folds batch norm
   into the convolutions and folds constants, converts each op to ONNX (opset 17) and checks the model with
   onnx.checker (full check, with shape inference) before writing it.
3. onnxruntime runs the file: its outputs equal braze's.
4. Inside the file: plain Conv / Relu / ReduceMean / MatMul nodes and one initializer per merged weight, no adapter
   factors and no batch norm.
5. A model that returns its loss exports too: the inference pipeline writes cross_entropy out in ops ONNX has, and
   onnxruntime computes the same loss.

Run: python examples/export_onnx.py   (needs onnx and onnxruntime: pip install onnx onnxruntime; seconds)
"""
from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

import braze
import braze.nn as nn
import braze.nn.functional as F


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.c2, self.b2 = nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: Any) -> Any:
        x = F.relu(self.b1(self.c1(x)))
        x = F.relu(self.b2(self.c2(x)))
        return self.fc(x.mean(dim=(2, 3)))


class Scored(nn.Module):
    """The CNN with its training loss attached, as an evaluation script computes it."""

    def __init__(self, cnn: CNN) -> None:
        super().__init__()
        self.cnn, self.loss = cnn, nn.CrossEntropyLoss()

    def forward(self, x: Any, labels: Any) -> Any:
        return self.loss(self.cnn(x), labels)


def adapted_cnn() -> CNN:
    """The CNN with LoRA adapters whose b factors hold values, as after fine-tuning, in evaluation mode."""
    braze.manual_seed(0)
    model = CNN().apply_lora(nn.Lora(4, 8, targets=["c1", "c2", "fc"]))
    rng = np.random.default_rng(0)
    for _, p in model.named_parameters():
        if p.adapter is not None:
            p.adapter.b.assign(rng.standard_normal(p.adapter.b.lazy_shape) * 0.05)
    return model.eval()


def main() -> None:
    model = adapted_cnn()
    x = np.random.default_rng(1).standard_normal((4, 3, 16, 16)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cnn.onnx"
        onnx_model = braze.export_onnx(model, path, x)
        print(f"2. wrote {path.name}: {path.stat().st_size / 1024:.0f} KiB, opset "
              f"{onnx_model.opset_import[0].version}, inputs {[i.name for i in onnx_model.graph.input]}, outputs "
              f"{[o.name for o in onnx_model.graph.output]}")
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (theirs,) = session.run(None, {"x": x})
    with braze.no_grad():
        ours = model(braze.tensor(x)).numpy()
    error = float(np.abs(theirs - ours).max())
    print(f"3. onnxruntime vs braze: max |difference| = {error:.2e}")
    assert error <= 1e-5 * max(1.0, float(np.abs(ours).max()))

    ops = Counter(n.op_type for n in onnx_model.graph.node)
    weights = [t.name for t in onnx_model.graph.initializer if not t.name.startswith("_")]
    print(f"4. nodes: {dict(ops)}; weights: {weights}")
    assert "BatchNormalization" not in ops and not any("lora" in w for w in weights)

    labels = np.array([0, 1, 2, 3], dtype=np.int64)
    scored = Scored(model).eval()
    with tempfile.TemporaryDirectory() as tmp:
        braze.export_onnx(scored, Path(tmp) / "scored.onnx", x, labels)
        session = ort.InferenceSession(str(Path(tmp) / "scored.onnx"), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        (loss,) = session.run(None, dict(zip(names, (x, labels))))
    with braze.no_grad():
        expected = float(scored(braze.tensor(x), braze.tensor(labels)).numpy())
    print(f"5. the loss in onnxruntime {float(loss):.6f}, in braze {expected:.6f}")
    assert abs(float(loss) - expected) <= 1e-5 * max(1.0, abs(expected))


if __name__ == "__main__":
    main()
