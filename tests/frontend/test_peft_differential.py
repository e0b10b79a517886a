"""PEFT adapters through real PEFT: a model written once against the shared torch.nn API, built in braze and in
torch with equal weights; an adapter PEFT saved loads onto the braze model and gives torch+PEFT's outputs, and an
adapter braze saved loads into PEFT and gives braze's outputs (float32, rtol 1e-5 / atol 1e-5).

MultiheadAttention is compared by its adapted weights (base + PEFT's get_delta_weight) rather than its outputs:
PEFT 0.21's MultiheadAttention forward adds the out_proj delta twice (huggingface/peft#3774), while braze computes
the W + scale * B @ A that PEFT's own get_delta_weight defines.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as bnn

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

IDS = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
IMG = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)


def build(nn: Any) -> Any:
    """The model, in either framework (`nn` is braze.nn or torch.nn)."""
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 8)
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
            self.conv = nn.Conv2d(3, 4, 3)
            self.fc1 = nn.Linear(8, 6)
            self.head = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2))

        def forward(self, ids: Any, img: Any) -> Any:
            h = self.emb(ids)
            h, _ = self.attn(h, h, h)
            return self.head(self.fc1(h)), self.conv(img)
    return Net().eval()


def twins() -> tuple[Any, Any]:
    """The braze model and a torch model holding the same weights."""
    braze.manual_seed(0)
    ours = build(bnn)
    theirs = build(torch.nn)
    theirs.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ours.state_dict().items()})
    return ours, theirs


def braze_outputs(model: Any) -> list[np.ndarray]:
    with braze.no_grad():
        return [y.numpy() for y in model(braze.tensor(IDS), braze.tensor(IMG))]


def torch_outputs(model: Any) -> list[np.ndarray]:
    with torch.no_grad():
        return [y.numpy() for y in model(torch.from_numpy(IDS), torch.from_numpy(IMG))]


def peft_model(theirs: Any, **config: Any) -> Any:
    """torch+PEFT with random (non-zero) factors."""
    model = peft.get_peft_model(theirs, peft.LoraConfig(**config))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    return model.eval()


CONFIGS = {
    "patterns": dict(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=["emb", "conv", "fc1", "head.0"],
                     rank_pattern={"fc1": 2}, alpha_pattern={"conv": 3}),
    "regex-rslora": dict(r=3, lora_alpha=5, use_rslora=True, target_modules=r"(fc1|head\.[02]|conv)"),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_peft_saved_adapter_gives_braze_the_outputs_of_torch_and_peft(name: str, tmp_path: Path) -> None:
    ours, theirs = twins()
    adapted = peft_model(theirs, **CONFIGS[name])
    adapted.save_pretrained(tmp_path)
    ours.load_peft_adapter(tmp_path).eval()
    for got, want in zip(braze_outputs(ours), torch_outputs(adapted), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_braze_saved_adapter_gives_peft_the_outputs_of_braze(tmp_path: Path) -> None:
    ours, theirs = twins()
    ours.apply_lora(bnn.Lora(3, 6, targets=["emb", "conv", "fc1", "head.0"])).eval()
    rng = np.random.default_rng(2)
    for _, p in ours.named_parameters():
        if p.adapter is not None:
            p.adapter.b.assign(rng.standard_normal(p.adapter.b.lazy_shape) * 0.1)
    ours.save_peft_adapter(tmp_path)
    adapted = peft.PeftModel.from_pretrained(theirs, tmp_path).eval()
    for got, want in zip(torch_outputs(adapted), braze_outputs(ours), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _attention_weights(model: Any) -> tuple[np.ndarray, np.ndarray]:
    with braze.no_grad():
        return model.attn.in_proj_weight.val().detach().numpy(), model.attn.out_proj.weight.val().detach().numpy()


def _peft_attention_deltas(adapted: Any) -> tuple[np.ndarray, np.ndarray]:
    layer = adapted.base_model.model.attn
    with torch.no_grad():
        return (layer.get_delta_weight("default").numpy(),
                layer.base_layer.out_proj.get_delta_weight("default").numpy())


# PEFT before 0.22.0 applied a MultiheadAttention's out_proj delta twice (what braze reads its adapters as); from
# 0.22.0 on, once (and braze writes adapters that say so)
OUT_PROJ_TIMES = 2 if tuple(int(part) for part in peft.__version__.split(".")[:2]) < (0, 22) else 1


def test_attention_adapter_weights_agree_with_peft_in_both_directions(tmp_path: Path) -> None:
    ours, theirs = twins()
    base = _attention_weights(ours)
    adapted = peft_model(theirs, r=2, lora_alpha=6, target_modules=["attn"])
    adapted.save_pretrained(tmp_path / "from_peft")
    ours.load_peft_adapter(tmp_path / "from_peft")
    in_delta, out_delta = _peft_attention_deltas(adapted)
    applied = (in_delta, OUT_PROJ_TIMES * out_delta)
    for got, weight, delta in zip(_attention_weights(ours), base, applied, strict=True):
        np.testing.assert_allclose(got, weight + delta, rtol=1e-5, atol=1e-6)
    ours.save_peft_adapter(tmp_path / "from_braze")
    _, fresh = twins()
    reloaded = peft.PeftModel.from_pretrained(fresh, tmp_path / "from_braze")
    for got, want in zip(_peft_attention_deltas(reloaded), applied, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
