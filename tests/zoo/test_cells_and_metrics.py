"""Model files that use the less common parts of torch's surface, each one source text run under torch and under
braze: an attention seq2seq decoding step by step with nn.LSTMCell over a bidirectional GRU encoder, a patch
classifier built with F.unfold, torch.meshgrid position embeddings, nn.SELU, Tensor.norm and F.cosine_similarity,
and a Siamese nn.GRUCell encoder scored with F.pairwise_distance.

Checked against torch: strict loading of torch's weights (the position buffer included); eager outputs and the
gradients of a training loss with respect to every parameter and floating input, in float64 to 1e-9 and float32 to
1e-4; the compiled valid() snapshot in float32 to 1e-4.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from tests.zoo.harness import check_model

pytest.importorskip("torch")

Namespace = dict[str, Any]
FLOAT64 = {"dtype": "float64", "rtol": 1e-9, "atol": 1e-10, "compile_rtol": 1e-4, "compile_atol": 1e-5}
FLOAT32 = {"dtype": "float32", "rtol": 1e-4, "atol": 1e-5, "compile_rtol": 1e-4, "compile_atol": 1e-5}


def token_pair(ns: Namespace, rng: np.random.Generator) -> tuple:
    """Source (2 x 7) and target (2 x 5) token ids."""
    return ns["torch"].tensor(rng.integers(0, 40, (2, 7))), ns["torch"].tensor(rng.integers(0, 30, (2, 5)))


def next_token_loss(ns: Namespace, logits: Any) -> Any:
    """Cross-entropy of each step's logits against fixed next tokens."""
    targets = np.random.default_rng(4).integers(0, logits.shape[-1], logits.shape[:2])
    return ns["F"].cross_entropy(logits.reshape(-1, logits.shape[-1]), ns["torch"].tensor(targets.reshape(-1)))


def images(ns: Namespace, rng: np.random.Generator) -> tuple:
    return (ns["torch"].tensor(rng.standard_normal((3, 3, 16, 16))),)


def sequences(ns: Namespace, rng: np.random.Generator) -> tuple:
    return tuple(ns["torch"].tensor(rng.standard_normal((4, 5, 6))) for _ in range(2))


def contrastive(ns: Namespace, logits: Any) -> Any:
    """Binary cross-entropy of the pair logits against fixed same/different labels."""
    labels = ns["torch"].tensor(np.array([1.0, 0.0, 1.0, 0.0]), dtype=logits.dtype)
    return ns["F"].binary_cross_entropy_with_logits(logits, labels)


CASES: list[tuple[str, str, Callable[[Namespace], Any], Callable, Callable]] = [
    ("seq2seq_lstm_cell", "seq2seq", lambda ns: ns["Seq2Seq"](), token_pair, next_token_loss),
    ("cosine_patch_net", "cosine_net", lambda ns: ns["CosineNet"](), images,
     lambda ns, logits: ns["F"].cross_entropy(logits, ns["torch"].tensor([1, 4, 0]))),
    ("siamese_gru_cell", "cosine_net", lambda ns: ns["SiameseNet"](), sequences, contrastive),
]


@pytest.mark.parametrize("precision", [FLOAT64, FLOAT32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_model_file_matches_torch(case: tuple, precision: dict, tmp_path: Any) -> None:
    _, file, build, inputs, loss = case
    check_model(file, build, inputs, tmp_path, loss=loss, **precision)
