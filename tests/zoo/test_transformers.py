"""The transformer half of the model zoo against PyTorch: GPT-2, a LLaMA block and a BERT encoder, each one source
text run under torch and under braze (imports swapped): torch weights load strictly, eager outputs and gradients
match (float64 to 1e-9, float32 to 1e-4), and the compiled valid() snapshot matches torch's eval() output (float32,
to 1e-4), loss outputs included. GPT-2's sampling loop picks what torch's model ranks top, its AdamW training loop
leaves torch's weights, and LLaMA's key/value-cached decoding gives torch's tokens."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from tests.zoo.harness import Namespace, build_pair, check_model, run_model_file  # noqa: E402

# float64 checks eager exactness; the compiled snapshot is checked in float32, the precision models are served in
F64 = {"dtype": "float64", "rtol": 1e-9, "atol": 1e-11, "compile_rtol": 1e-9, "compile_atol": 1e-11, "compiled": False}
F32 = {"dtype": "float32", "rtol": 1e-4, "atol": 1e-5, "compile_rtol": 1e-4, "compile_atol": 1e-5}


# --- GPT-2 --------------------------------------------------------------------------------------------------------

def _gpt2(ns: Namespace, **config: Any) -> Any:
    return ns["GPT"](ns["GPTConfig"](**config))


def _gpt2_flash(ns: Namespace) -> Any:
    return _gpt2(ns, flash=True)


def _gpt2_tokens(ns: Namespace, rng: np.random.Generator) -> tuple:
    tokens = rng.integers(0, 61, (2, 13))
    return ns["torch"].tensor(tokens[:, :12]), ns["torch"].tensor(tokens[:, 1:])


def _returned_loss(ns: Namespace, out: Any) -> Any:
    return out[1]


@pytest.mark.parametrize("precision", [F64, F32], ids=["float64", "float32"])
def test_gpt2_matches_torch(tmp_path: Path, precision: dict[str, Any]) -> None:
    check_model("gpt2", _gpt2, _gpt2_tokens, tmp_path, loss=_returned_loss, **precision)


@pytest.mark.parametrize("precision", [F64, F32], ids=["float64", "float32"])
def test_gpt2_scaled_dot_product_attention_matches_torch(tmp_path: Path, precision: dict[str, Any]) -> None:
    check_model("gpt2", _gpt2_flash, _gpt2_tokens, tmp_path, loss=_returned_loss, **precision)


def test_gpt2_adamw_training_steps_match_torch(tmp_path: Path) -> None:
    """The file's own training loop (AdamW with weight-decay groups, clip_grad_norm_) leaves torch's weights."""
    torch_ns, braze_ns = run_model_file("gpt2", "torch"), run_model_file("gpt2", "braze")
    theirs, ours = build_pair(torch_ns, braze_ns, lambda ns: _gpt2(ns, dropout=0.0), tmp_path, dtype="float64")
    rng = np.random.default_rng(7)
    tokens = [rng.integers(0, 61, (2, 13)) for _ in range(3)]
    losses = {}
    for ns, model in ((torch_ns, theirs), (braze_ns, ours)):
        batches = [(ns["torch"].tensor(t[:, :12]), ns["torch"].tensor(t[:, 1:])) for t in tokens]
        losses[ns["__name__"]] = ns["train_steps"](model, batches, learning_rate=1e-2)
    np.testing.assert_allclose(losses["zoo_braze"], losses["zoo_torch"], rtol=1e-9)
    weights = {key: p.detach().numpy() for key, p in theirs.named_parameters()}
    for key, p in ours.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), weights[key], rtol=1e-9, atol=1e-12, err_msg=key)


@pytest.fixture(scope="module")
def gpt2_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The float32 GPT-2 under torch and under braze with torch's weights."""
    return build_pair(run_model_file("gpt2", "torch"), run_model_file("gpt2", "braze"), _gpt2,
                      tmp_path_factory.mktemp("gpt2"))


PROMPT = np.array([[5, 17, 42], [60, 0, 33]])
NEW_TOKENS = 15  # past block_size, so generate crops its context


def test_gpt2_generate_top1_is_torchs_greedy_continuation(gpt2_pair: tuple[Any, Any]) -> None:
    import torch

    import braze
    theirs, ours = gpt2_pair
    expected = theirs.generate(torch.tensor(PROMPT), NEW_TOKENS, top_k=1).numpy()
    assert np.array_equal(ours.generate(braze.tensor(PROMPT), NEW_TOKENS, top_k=1).numpy(), expected)


def test_gpt2_generate_samples_from_the_top_k(gpt2_pair: tuple[Any, Any]) -> None:
    """Every sampled token is one of the k most likely next tokens under torch's model, so top-k filtering,
    multinomial sampling and the growing context all work."""
    import torch

    import braze
    theirs, ours = gpt2_pair
    braze.manual_seed(3)
    out = ours.generate(braze.tensor(PROMPT), NEW_TOKENS, temperature=0.8, top_k=5)
    assert (out.dtype, tuple(out.shape)) == (braze.long, (2, 3 + NEW_TOKENS))
    tokens = out.numpy()
    assert np.array_equal(tokens[:, :3], PROMPT)
    for t in range(3, tokens.shape[1]):
        context = torch.tensor(tokens[:, max(0, t - 16):t])
        with torch.no_grad():
            top5 = theirs(context)[0][:, -1].topk(5).indices.numpy()
        assert all(tokens[b, t] in top5[b] for b in range(2)), f"token {t} is not among the top 5"


# --- LLaMA --------------------------------------------------------------------------------------------------------

def _llama(ns: Namespace) -> Any:
    return ns["Transformer"](ns["ModelArgs"]())


def _llama_tokens(ns: Namespace, rng: np.random.Generator) -> tuple:
    return (ns["torch"].tensor(rng.integers(0, 53, (2, 11))),)


def test_llama_cached_decoding_is_torchs_and_the_uncached_greedy_continuation(tmp_path: Path) -> None:
    """generate() fills the key/value cache by slice assignment and masks with hstack; its tokens are torch's,
    and each is the argmax of braze's full (uncached) forward over the tokens before it."""
    import torch

    import braze
    theirs, ours = build_pair(run_model_file("llama", "torch"), run_model_file("llama", "braze"), _llama, tmp_path)
    prompt = np.array([[3, 14, 15, 9], [26, 5, 35, 8]])
    tokens = ours.generate(braze.tensor(prompt), 9).numpy()
    np.testing.assert_array_equal(tokens, theirs.generate(torch.tensor(prompt), 9).numpy())
    with braze.no_grad():
        logits = ours(braze.tensor(tokens[:, :-1])).numpy()
    np.testing.assert_array_equal(tokens[:, 4:], logits[:, 3:].argmax(-1))


def _llama_block(ns: Namespace) -> Any:
    return ns["Block"](ns["ModelArgs"]())


def _llama_embeddings(ns: Namespace, rng: np.random.Generator) -> tuple:
    return (ns["torch"].tensor(rng.standard_normal((2, 9, 48))),)


@pytest.mark.parametrize("precision", [F64, F32], ids=["float64", "float32"])
def test_llama_matches_torch(tmp_path: Path, precision: dict[str, Any]) -> None:
    check_model("llama", _llama, _llama_tokens, tmp_path, **precision)


def _llama_checkpointed(ns: Namespace) -> Any:
    model = _llama(ns)
    model.gradient_checkpointing = True
    return model


def test_llama_gradient_checkpointing_in_training_matches_torch(tmp_path: Path) -> None:
    check_model("llama", _llama_checkpointed, _llama_tokens, tmp_path, train=True, **F64)


def test_llama_block_input_gradients_match_torch(tmp_path: Path) -> None:
    check_model("llama", _llama_block, _llama_embeddings, tmp_path, **F64)


# --- BERT ---------------------------------------------------------------------------------------------------------

def _bert(ns: Namespace) -> Any:
    return ns["BertForSequenceClassification"](ns["BertConfig"]())


def _bert_batch(ns: Namespace, rng: np.random.Generator) -> tuple:
    """Two sequences of 10, the second padded after 6 tokens; two segments; class labels."""
    torch = ns["torch"]
    ids = rng.integers(1, 67, (2, 10))
    mask = np.ones((2, 10), dtype=np.int64)
    ids[1, 6:], mask[1, 6:] = 0, 0
    segments = (np.arange(10) >= 5).astype(np.int64)[None].repeat(2, axis=0)
    return torch.tensor(ids), torch.tensor(mask), torch.tensor(segments), torch.tensor(rng.integers(0, 3, (2,)))


@pytest.mark.parametrize("precision", [F64, F32], ids=["float64", "float32"])
def test_bert_matches_torch(tmp_path: Path, precision: dict[str, Any]) -> None:
    check_model("bert", _bert, _bert_batch, tmp_path, loss=_returned_loss, **precision)
