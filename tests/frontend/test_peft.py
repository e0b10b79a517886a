"""PEFT adapters without the peft package: hand-built adapter directories in PEFT's layout load onto braze modules
with PEFT's scaling and factor layouts, bad adapters are refused by key or path (leaving the module unchanged),
and braze's adapters save in that layout and load back. Differential tests against real PEFT are in
test_peft_differential.py. Values are float32; merged weights agree with numpy's W + scale * B @ A to 1e-6."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
from braze.frontend.safetensors_io import encode

R = np.random.default_rng(0)
PREFIX = "base_model.model."


def f32(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def write_adapter(directory: Path, config: dict[str, Any], tensors: dict[str, np.ndarray]) -> Path:
    """A PEFT adapter directory: adapter_config.json and adapter_model.safetensors."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", **config}))
    (directory / "adapter_model.safetensors").write_bytes(encode(tensors, {"format": "pt"}))
    return directory


def initialized(model: nn.Module) -> nn.Module:
    """The model with every lazy parameter drawn now (so equal seeds give equal models in any later order)."""
    for p in model.parameters():
        p.val()
    return model


def mlp() -> nn.Module:
    braze.manual_seed(0)
    return initialized(nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3)).eval())


def mixed() -> nn.Module:
    braze.manual_seed(0)
    return initialized(Mixed().eval())


def mlp_factors(rank: int = 2, name: str = "") -> dict[str, np.ndarray]:
    infix = f".{name}" if name else ""
    return {f"{PREFIX}0.lora_A{infix}.weight": f32(rank, 4), f"{PREFIX}0.lora_B{infix}.weight": f32(6, rank),
            f"{PREFIX}2.lora_A{infix}.weight": f32(rank, 6), f"{PREFIX}2.lora_B{infix}.weight": f32(3, rank)}


def arr(t: Any) -> np.ndarray:
    with braze.no_grad():
        return np.array((t.val() if isinstance(t, nn.Param) else t).detach().numpy())


def merged(base: np.ndarray, tensors: dict[str, np.ndarray], key: str, scale: float) -> np.ndarray:
    return base + scale * tensors[f"{PREFIX}{key}.lora_B.weight"] @ tensors[f"{PREFIX}{key}.lora_A.weight"]


# --- loading ------------------------------------------------------------------------------------------------------
def test_linear_factors_give_weight_plus_alpha_over_r_times_b_a(tmp_path: Path) -> None:
    model, tensors = mlp(), mlp_factors()
    base = {k: arr(p) for k, p in model.named_parameters()}
    model.load_peft_adapter(write_adapter(tmp_path, {"r": 2, "lora_alpha": 3, "target_modules": ["0", "2"]}, tensors))
    for key in ("0", "2"):
        np.testing.assert_allclose(arr(model.get_parameter(f"{key}.weight")),
                                   merged(base[f"{key}.weight"], tensors, key, 1.5), rtol=1e-6, atol=1e-6)
    x = f32(5, 4)
    w0, w2 = (merged(base[f"{k}.weight"], tensors, k, 1.5) for k in ("0", "2"))
    expected = np.maximum(x @ w0.T + base["0.bias"], 0) @ w2.T + base["2.bias"]
    np.testing.assert_allclose(arr(model(braze.tensor(x))), expected, rtol=1e-5, atol=1e-5)


def test_adapter_loads_from_its_directory_config_or_weights_file(tmp_path: Path) -> None:
    directory = write_adapter(tmp_path, {"r": 2, "lora_alpha": 2, "target_modules": ["0", "2"]}, mlp_factors())
    weights = [arr(mlp().load_peft_adapter(p).get_parameter("0.weight"))
               for p in (directory, directory / "adapter_config.json", directory / "adapter_model.safetensors")]
    np.testing.assert_array_equal(weights[0], weights[1])
    np.testing.assert_array_equal(weights[0], weights[2])


def test_keys_with_the_adapter_name_load(tmp_path: Path) -> None:
    tensors = mlp_factors(name="default")
    model = mlp().load_peft_adapter(write_adapter(tmp_path, {"r": 2, "lora_alpha": 2, "target_modules": ["0", "2"]},
                                                  tensors))
    np.testing.assert_array_equal(arr(model[0].weight.adapter.a), tensors[f"{PREFIX}0.lora_A.default.weight"])


def test_rank_and_alpha_patterns_and_rslora_set_each_scale(tmp_path: Path) -> None:
    tensors = {**mlp_factors(), f"{PREFIX}2.lora_A.weight": f32(3, 6), f"{PREFIX}2.lora_B.weight": f32(3, 3)}
    config = {"r": 2, "lora_alpha": 4, "use_rslora": True, "target_modules": ["0", "2"],
              "rank_pattern": {"2": 3}, "alpha_pattern": {"^0": 5}}
    model = mlp().load_peft_adapter(write_adapter(tmp_path, config, tensors))
    assert model[0].weight.adapter.rank == 2 and model[0].weight.adapter.scale == pytest.approx(5 / math.sqrt(2))
    assert model[2].weight.adapter.rank == 3 and model[2].weight.adapter.scale == pytest.approx(4 / math.sqrt(3))


def test_regex_target_modules_and_exclude_modules_select_like_peft(tmp_path: Path) -> None:
    tensors = {k: v for k, v in mlp_factors().items() if ".2." in k}
    config = {"r": 2, "lora_alpha": 2, "target_modules": r"\d", "exclude_modules": ["0", "1"]}
    model = mlp().load_peft_adapter(write_adapter(tmp_path, config, tensors))
    assert model[0].weight.adapter is None and model[2].weight.adapter is not None


def test_fan_in_fan_out_is_ignored_for_linear_layers_as_peft_does(tmp_path: Path) -> None:
    tensors = mlp_factors()
    plain = mlp().load_peft_adapter(write_adapter(tmp_path / "a", {"r": 2, "target_modules": ["0", "2"]}, tensors))
    flipped = mlp().load_peft_adapter(write_adapter(tmp_path / "b", {"r": 2, "target_modules": ["0", "2"],
                                                                     "fan_in_fan_out": True}, tensors))
    np.testing.assert_array_equal(arr(plain[0].weight), arr(flipped[0].weight))


class Mixed(nn.Module):
    """An embedding, a convolution and an attention layer: PEFT's other factor layouts."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.conv = nn.Embedding(10, 8), nn.Conv2d(3, 4, 3)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, ids: Any, img: Any) -> Any:
        h = self.emb(ids)
        return self.attn(h, h, h)[0], self.conv(img)


def mixed_factors() -> dict[str, np.ndarray]:
    return {f"{PREFIX}emb.lora_embedding_A": f32(2, 10), f"{PREFIX}emb.lora_embedding_B": f32(8, 2),
            f"{PREFIX}conv.lora_A.weight": f32(2, 3, 3, 3), f"{PREFIX}conv.lora_B.weight": f32(4, 2, 1, 1),
            f"{PREFIX}attn.lora_A.weight": f32(2, 8), f"{PREFIX}attn.lora_B.weight": f32(24, 2),
            f"{PREFIX}attn.base_layer.out_proj.lora_A.weight": f32(2, 8),
            f"{PREFIX}attn.base_layer.out_proj.lora_B.weight": f32(8, 2)}


def test_embedding_conv_and_attention_factors_map_to_their_weights(tmp_path: Path) -> None:
    model, t = mixed(), mixed_factors()
    base = {k: arr(p) for k, p in model.named_parameters()}
    model.load_peft_adapter(write_adapter(tmp_path, {"r": 2, "lora_alpha": 4, "target_modules": ["emb", "conv", "attn"],
                                                     "peft_version": "0.22.0"}, t))
    emb_delta = (t[f"{PREFIX}emb.lora_embedding_B"] @ t[f"{PREFIX}emb.lora_embedding_A"]).T
    np.testing.assert_allclose(arr(model.emb.weight), base["emb.weight"] + 2 * emb_delta, rtol=1e-6, atol=1e-6)
    conv_delta = (t[f"{PREFIX}conv.lora_B.weight"].reshape(4, 2) @ t[f"{PREFIX}conv.lora_A.weight"].reshape(2, -1))
    np.testing.assert_allclose(arr(model.conv.weight), base["conv.weight"] + 2 * conv_delta.reshape(4, 3, 3, 3),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(arr(model.attn.in_proj_weight), merged(base["attn.in_proj_weight"], t, "attn", 2),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(arr(model.attn.out_proj.weight),
                               merged(base["attn.out_proj.weight"], t, "attn.base_layer.out_proj", 2),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("version, twice", [(None, True), ("0.17.1", True), ("0.21.0", True), ("0.21.2", True),
                                            ("0.21.2.dev0", False), ("0.21.1.dev0@abc123", False), ("0.22.0", False),
                                            ("1.0.0", False)])
def test_out_proj_factors_saved_by_peft_before_0_22_count_twice(tmp_path: Path, version: str | None,
                                                                twice: bool) -> None:
    """PEFT before 0.22.0 applied a MultiheadAttention's out_proj LoRA twice; PEFT 0.22.0 reads such adapters with
    lora_B doubled, and so does braze (dev versions from 0.21.1 have the fix). in_proj's factors count once."""
    model, t = mixed(), mixed_factors()
    base = {k: arr(p) for k, p in model.named_parameters()}
    config = {"r": 2, "lora_alpha": 4, "target_modules": ["attn"]} | ({} if version is None else
                                                                    {"peft_version": version})
    model.load_peft_adapter(write_adapter(tmp_path, config, {k: v for k, v in t.items() if ".attn." in f".{k}"}))
    np.testing.assert_allclose(arr(model.attn.in_proj_weight), merged(base["attn.in_proj_weight"], t, "attn", 2),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(arr(model.attn.out_proj.weight), merged(
        base["attn.out_proj.weight"], t, "attn.base_layer.out_proj", 4 if twice else 2), rtol=1e-6, atol=1e-6)
    model.save_peft_adapter(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "adapter_config.json").read_text())["peft_version"] == "0.22.0"
    reread = mixed().load_peft_adapter(tmp_path / "again")
    np.testing.assert_allclose(arr(reread.attn.out_proj.weight), arr(model.attn.out_proj.weight), rtol=1e-6,
                               atol=1e-6)


def test_a_peft_version_that_is_no_version_string_is_refused(tmp_path: Path) -> None:
    model, t = mixed(), mixed_factors()
    with pytest.raises(braze.RecordError, match=r"peft_version must be a version string like '0.22.0', got 22"):
        model.load_peft_adapter(write_adapter(tmp_path, {"r": 2, "lora_alpha": 4, "target_modules": ["attn"],
                                                         "peft_version": 22}, t))


def test_existing_adapters_of_the_same_ranks_get_the_files_factors(tmp_path: Path) -> None:
    model = mlp().apply_lora(nn.Lora(2, 8))
    tensors = mlp_factors()
    model.load_peft_adapter(write_adapter(tmp_path, {"r": 2, "lora_alpha": 2, "target_modules": ["0", "2"]}, tensors))
    np.testing.assert_array_equal(arr(model[2].weight.adapter.b), tensors[f"{PREFIX}2.lora_B.weight"])
    assert model[2].weight.adapter.scale == 1.0


def test_adapter_loads_onto_a_quantized_base(tmp_path: Path) -> None:
    model = mlp().apply_qlora(nn.QLora(2, 2))
    dequantized = arr(model[0].weight.base())
    tensors = mlp_factors()
    model.load_peft_adapter(write_adapter(tmp_path, {"r": 2, "lora_alpha": 2, "target_modules": ["0", "2"]}, tensors))
    np.testing.assert_allclose(arr(model[0].weight), merged(dequantized, tensors, "0", 1.0), rtol=1e-6, atol=1e-6)


def test_loaded_adapters_are_trainable_and_bases_frozen(tmp_path: Path) -> None:
    model = mlp().load_peft_adapter(write_adapter(tmp_path, {"r": 2, "target_modules": ["0", "2"]}, mlp_factors()))
    trainable = sorted(k for k, p in model.named_parameters() if p.requires_grad)
    assert trainable == ["0.weight.lora_a", "0.weight.lora_b", "2.weight.lora_a", "2.weight.lora_b"]


# --- bad adapters -------------------------------------------------------------------------------------------------
BASE = {"r": 2, "lora_alpha": 2, "target_modules": ["0", "2"]}


@pytest.mark.parametrize("config, tensors, message", [
    (BASE, {k: v for k, v in mlp_factors().items() if k != f"{PREFIX}2.lora_B.weight"},
     r"missing tensor 'base_model\.model\.2\.lora_B\.weight' \(adapter_config\.json targets 2\)"),
    ({**BASE, "r": 3}, mlp_factors(),
     r"tensor 'base_model\.model\.0\.lora_A\.weight' has shape \(2, 4\), expected \(3, 4\): adapter_config\.json "
     r"gives 0 rank 3"),
    ({**BASE, "target_modules": ["decoder"]}, mlp_factors(),
     r"target_modules \['decoder'\] select no module of the Sequential; its module paths include: 0, 1, 2"),
    ({**BASE, "target_modules": ["1"]}, mlp_factors(), r"target_modules select 1, a ReLU; LoRA adapts Linear"),
    ({**BASE, "target_modules": ["0"]}, mlp_factors(),
     r"tensor 'base_model\.model\.2\.lora_A\.weight' is not a LoRA factor of a module the adapter configuration "
     r"targets"),
    ({**BASE, "use_dora": True}, mlp_factors(), r"use_dora=True \(DoRA\) is not supported"),
    ({**BASE, "bias": "all"}, mlp_factors(), r"bias='all' \(trained biases\) is not supported"),
    ({**BASE, "peft_type": "PREFIX_TUNING"}, mlp_factors(), r"peft_type is 'PREFIX_TUNING'; braze reads LoRA"),
    ({**BASE, "r": 0}, mlp_factors(), r"r must be a positive integer, got 0"),
    ({**BASE, "target_modules": "(unclosed"}, mlp_factors(), r"target_modules pattern '\(unclosed' is not a regular"),
    ({**BASE, "lora_dropout": 1.5}, mlp_factors(), r"lora_dropout must be in \[0, 1\), got 1\.5"),
    (BASE, {**mlp_factors(), f"{PREFIX}0.lora_magnitude_vector": f32(6)},
     r"tensor 'base_model\.model\.0\.lora_magnitude_vector' is not a PEFT LoRA factor"),
    (BASE, {**mlp_factors(), "0.lora_A.weight": f32(2, 4)}, r"tensor '0\.lora_A\.weight' is not a PEFT LoRA factor"),
    (BASE, {**mlp_factors(), f"{PREFIX}0.lora_A.other.weight": f32(2, 4)}, r"belong to several adapters"),
])
def test_bad_adapter_is_refused_by_key_and_leaves_the_module_unchanged(config: dict[str, Any],
                                                                       tensors: dict[str, np.ndarray], message: str,
                                                                       tmp_path: Path) -> None:
    model = mlp()
    before = {k: (arr(p), p.requires_grad) for k, p in model.named_parameters()}
    with pytest.raises(braze.RecordError, match=message):
        model.load_peft_adapter(write_adapter(tmp_path, {"peft_type": "LORA", **config}, tensors))
    after = {k: (arr(p), p.requires_grad) for k, p in model.named_parameters()}
    assert before.keys() == after.keys() and all(model.get_parameter(k).adapter is None for k in after)
    assert all(np.array_equal(before[k][0], after[k][0]) and before[k][1] == after[k][1] for k in after)


def test_out_proj_targeted_besides_its_attention_is_refused(tmp_path: Path) -> None:
    config = {"r": 2, "target_modules": r"attn|attn\.out_proj"}
    with pytest.raises(braze.RecordError, match=r"select attn\.out_proj\.weight twice"):
        mixed().load_peft_adapter(write_adapter(tmp_path, config, mixed_factors()))


def test_existing_adapter_outside_the_targets_is_named(tmp_path: Path) -> None:
    tensors = {k: v for k, v in mlp_factors().items() if ".0." in k}
    with pytest.raises(braze.RecordError, match=r"2\.weight has an adapter the PEFT adapter does not target"):
        mlp().apply_lora(nn.Lora(2, 2)).load_peft_adapter(write_adapter(tmp_path, {**BASE, "target_modules": ["0"]},
                                                                        tensors))


def test_existing_adapter_of_another_rank_is_named(tmp_path: Path) -> None:
    model = mlp().apply_lora(nn.Lora(4, 8))
    with pytest.raises(braze.RecordError, match=r"0\.weight has LoraAdapter\(rank=4.*gives it rank 2"):
        model.load_peft_adapter(write_adapter(tmp_path, BASE, mlp_factors()))


@pytest.mark.parametrize("files, message", [
    ({"adapter_model.safetensors": encode(mlp_factors(), {})}, r"adapter_config\.json does not exist"),
    ({"adapter_config.json": b"{not json"}, r"adapter_model\.safetensors does not exist"),
    ({"adapter_config.json": b"{not json", "adapter_model.safetensors": encode(mlp_factors(), {})},
     r"adapter_config\.json: not valid JSON"),
    ({"adapter_config.json": json.dumps({"peft_type": "LORA", **BASE}).encode(),
      "adapter_model.safetensors": encode(mlp_factors(), {})[:-9]}, r"truncated safetensors file"),
    ({"adapter_config.json": json.dumps({"peft_type": "LORA", **BASE}).encode(), "adapter_model.bin": b"pickle"},
     r"adapter_model\.bin, a pickle, is not read"),
])
def test_missing_or_damaged_files_are_named(files: dict[str, bytes], message: str, tmp_path: Path) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(braze.RecordError, match=message):
        mlp().load_peft_adapter(tmp_path)


# --- saving -------------------------------------------------------------------------------------------------------
def adapted_mlp(ranks: tuple[int, int] = (2, 2), alpha: float = 4.0) -> nn.Module:
    model = mlp().apply_reparameterization(_Only({"0.weight": nn.Lora(ranks[0], alpha),
                                                  "2.weight": nn.Lora(ranks[1], alpha)}))
    for _, p in model.named_parameters():
        if p.adapter is not None:
            p.adapter.b.assign(f32(*p.adapter.b.lazy_shape))
    return model


class _Only(nn.Reparameterizer):
    """LoRA adapters on exactly the given weights, each of its own configuration, the rest frozen."""

    def __init__(self, loras: dict[str, nn.Lora], rule: str = "linear") -> None:
        self.loras, self.rule = loras, rule

    def reparameterize(self, path: str, param: nn.Param, owner: Any) -> Any:
        param.set_require_grad(False)
        lora = self.loras.get(path)
        return None if lora is None else lora.adapter(param, self.rule, owner)


def test_saved_adapter_is_peft_layout_and_loads_back_equal(tmp_path: Path) -> None:
    model = adapted_mlp(ranks=(2, 3))
    model.save_peft_adapter(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 2, 4)
    assert config["target_modules"] == ["0", "2"]
    assert config["rank_pattern"] == {"^2": 3} and config["alpha_pattern"] == {}
    loaded = mlp().load_peft_adapter(tmp_path / "adapter")
    for key in ("0.weight", "2.weight"):
        a, b = model.get_parameter(key).adapter, loaded.get_parameter(key).adapter
        np.testing.assert_array_equal(arr(a.a), arr(b.a))
        assert a.scale == pytest.approx(b.scale, rel=1e-12)
    x = f32(3, 4)
    np.testing.assert_allclose(arr(loaded(braze.tensor(x))), arr(model(braze.tensor(x))), rtol=1e-6, atol=1e-6)


def test_saved_attention_embedding_and_conv_adapters_load_back(tmp_path: Path) -> None:
    model = mixed().apply_lora(nn.Lora(2, 4, targets=["emb", "conv", "attn", "attn.out_proj"]))
    for _, p in model.named_parameters():
        if p.adapter is not None:
            p.adapter.b.assign(f32(*p.adapter.b.lazy_shape))
    model.save_peft_adapter(tmp_path)
    loaded = mixed().load_peft_adapter(tmp_path)
    for key in ("emb.weight", "conv.weight", "attn.in_proj_weight", "attn.out_proj.weight"):
        np.testing.assert_allclose(arr(loaded.get_parameter(key)), arr(model.get_parameter(key)), rtol=1e-6,
                                   atol=1e-6)
    assert json.loads((tmp_path / "adapter_config.json").read_text())["target_modules"] == ["attn", "conv", "emb"]


def test_target_modules_become_a_regex_when_a_list_would_select_more(tmp_path: Path) -> None:
    def nested() -> nn.Module:
        braze.manual_seed(0)
        return initialized(nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))))
    model = nested().apply_reparameterization(_Only({"0.weight": nn.Lora(1, 1)}))
    model.save_peft_adapter(tmp_path)
    assert json.loads((tmp_path / "adapter_config.json").read_text())["target_modules"] == "(?:0)"
    loaded = nested().load_peft_adapter(tmp_path)
    assert loaded[0].weight.adapter is not None and loaded[1][0].weight.adapter is None


class _Matrix(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Param(braze.zeros(3, 4))


@pytest.mark.parametrize("build, message", [
    (lambda: mlp(), r"the Sequential has no LoRA adapters to save"),
    (lambda: _Matrix().apply_reparameterization(_Only({"table": nn.Lora(1, 1)}, "matrix")),
     r"table \(matrix rule\) is not one"),
    (lambda: mixed().apply_lora(nn.Lora(1, 1, targets=["attn.out_proj"])),
     r"attn\.out_proj\.weight is adapted but attn\.in_proj_weight is not"),
    (lambda: mlp().apply_reparameterization(_Only({"0.weight": nn.Lora(1, 1, dropout=0.1),
                                                   "2.weight": nn.Lora(1, 1, dropout=0.2)})),
     r"the adapters use different dropout"),
])
def test_adapters_peft_cannot_express_are_refused(build: Any, message: str, tmp_path: Path) -> None:
    with pytest.raises(braze.RecordError, match=message):
        build().save_peft_adapter(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_save_into_an_unwritable_place_names_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(braze.RecordError, match=r"file/adapter: cannot create the adapter directory"):
        adapted_mlp().save_peft_adapter(tmp_path / "file" / "adapter")
