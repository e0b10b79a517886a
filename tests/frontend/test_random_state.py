"""braze.manual_seed and braze.Generator drive every random draw (initialization, dropout, randperm,
shuffling, random_split), so a script repeats exactly; generator state saves and restores."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze import nn
from braze.utils.data import DataLoader, TensorDataset, random_split


def script(seed: int) -> list[np.ndarray]:
    """Everything random a training script does, after one manual_seed."""
    braze.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    nn.init.xavier_normal_(model[2].weight)
    out = model(braze.ones(3, 4))
    order = [int(i) for (batch,) in DataLoader(TensorDataset(braze.arange(10)), batch_size=3, shuffle=True)
             for i in batch]
    split = random_split(range(10), [0.5, 0.5])
    return [np.asarray(p) for p in model.parameters()] + [np.asarray(out), np.asarray(braze.randperm(8)),
                                                          np.array(order), np.array(list(split[0]))]


def test_manual_seed_repeats_a_whole_script():
    for a, b in zip(script(42), script(42)):
        np.testing.assert_array_equal(a, b)


def test_another_seed_changes_every_draw():
    for a, b in zip(script(1), script(2)):
        assert not np.array_equal(a, b)


def test_generator_state_round_trips():
    g = braze.Generator().manual_seed(7)
    state = g.get_state()
    first = braze.rand(4, generator=g).tolist()
    assert g.set_state(state) is g and braze.rand(4, generator=g).tolist() == first
    assert g.initial_seed() == 7


def test_global_rng_state_round_trips():
    state = braze.get_rng_state()
    first = braze.randn(3).tolist()
    braze.set_rng_state(state)
    assert braze.randn(3).tolist() == first


def test_seed_reseeds_from_entropy():
    g = braze.Generator()
    assert g.seed() == g.initial_seed() != 67280421310721


def test_generator_accepts_torchs_device_form():
    assert braze.Generator(device="cpu").initial_seed() == braze.Generator("cpu").initial_seed() == 67280421310721


def test_bad_seeds_and_states_raise():
    with pytest.raises(braze.BrazeError, match="the seed must be an int, got str"):
        braze.Generator().manual_seed("7")
    with pytest.raises(braze.BrazeError, match="not a state from Generator.get_state"):
        braze.Generator().set_state({"seed": 1})
