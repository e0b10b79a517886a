"""braze.utils.data: datasets, samplers and DataLoader give torch's batches and collation for the same index
order; shuffling and random_split follow braze's generators; bad arguments raise torch's errors."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import braze
from braze.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset, RandomSampler,
                              SequentialSampler, Subset, SubsetRandomSampler, TensorDataset, default_collate,
                              random_split)

Point = collections.namedtuple("Point", "x y")


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


class Samples(Dataset):
    """Samples of every structure default_collate handles: dicts, tuples, lists, namedtuples, arrays, numbers."""

    def __init__(self, n=7):
        self.n = n

    def __getitem__(self, i):
        return {"image": np.full((2, 3), i, dtype=np.float32), "label": i, "weight": i / 4.0,
                "pair": (np.float64(i), [i, -i]), "point": Point(i, 2.0 * i), "name": f"s{i}"}

    def __len__(self):
        return self.n


def plain(value):
    """A batch as nested Python lists/dicts with (dtype name, values) leaves, to compare across frameworks."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [plain(v) for v in value])
    if hasattr(value, "numpy"):
        array = np.asarray(value.numpy())
        return (str(array.dtype), array.tolist())
    return value


def test_dataloader_collates_like_torch(torch):
    ours = list(DataLoader(Samples(), batch_size=3))
    theirs = list(torch.utils.data.DataLoader(Samples(), batch_size=3))
    assert [plain(b) for b in ours] == [plain(b) for b in theirs]


def test_default_collate_types():
    batch = default_collate([Samples()[i] for i in range(2)])
    assert batch["image"].shape == (2, 2, 3) and batch["image"].dtype == braze.float32
    assert batch["label"].dtype == braze.int64 and batch["weight"].dtype == braze.float64
    assert isinstance(batch["pair"], list) and isinstance(batch["point"], Point) and batch["name"] == ["s0", "s1"]


@pytest.mark.parametrize("batch_size, drop_last", [(4, False), (4, True), (1, False), (10, False), (3, True)])
def test_tensor_dataset_batches_equal_torch_for_an_explicit_order(torch, batch_size, drop_last):
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10) % 3
    order = [3, 1, 4, 0, 5, 9, 2, 6, 8, 7]
    ours = DataLoader(TensorDataset(braze.tensor(x), braze.tensor(y)), batch_size=batch_size, sampler=order,
                      drop_last=drop_last)
    theirs = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y)),
                                         batch_size=batch_size, sampler=order, drop_last=drop_last)
    assert len(ours) == len(theirs)
    assert [plain(b) for b in ours] == [plain(b) for b in theirs]


def test_batch_size_none_converts_samples_without_batching(torch):
    data = [np.ones(2), np.zeros(2)]
    ours, theirs = DataLoader(data, batch_size=None), torch.utils.data.DataLoader(data, batch_size=None)
    assert [plain(b) for b in ours] == [plain(b) for b in theirs]


def test_collate_fn_replaces_default_collate():
    loader = DataLoader(list(range(5)), batch_size=2, collate_fn=lambda batch: sum(batch))
    assert list(loader) == [1, 5, 4]


def test_batch_sampler_groups_indices():
    assert [b.tolist() for b in DataLoader(list(range(5)), batch_sampler=[[4, 0], [2]])] == [[4, 0], [2]]
    assert list(BatchSampler(range(7), 3, False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(BatchSampler(range(7), 3, True)) == 2 and len(BatchSampler(range(7), 3, False)) == 3


def test_worker_threads_give_the_same_batches_in_order():
    ds = TensorDataset(braze.arange(50.0))
    seen = []
    threaded = DataLoader(ds, batch_size=4, num_workers=3, worker_init_fn=seen.append)
    assert [b[0].tolist() for b in threaded] == [b[0].tolist() for b in DataLoader(ds, batch_size=4)]
    assert sorted(seen) == list(range(len(seen))) and 1 <= len(seen) <= 3


# --- shuffling and generators -------------------------------------------------------------------------------------


def epoch(loader):
    return [int(i) for batch in loader for i in batch[0]]


def test_shuffle_covers_every_sample_once_and_differs_per_epoch():
    loader = DataLoader(TensorDataset(braze.arange(30)), batch_size=7, shuffle=True)
    first, second = epoch(loader), epoch(loader)
    assert sorted(first) == sorted(second) == list(range(30)) and first != second


def test_shuffle_with_a_generator_repeats():
    ds = TensorDataset(braze.arange(30))
    a = epoch(DataLoader(ds, batch_size=5, shuffle=True, generator=braze.Generator().manual_seed(1)))
    b = epoch(DataLoader(ds, batch_size=5, shuffle=True, generator=braze.Generator().manual_seed(1)))
    assert a == b and a != list(range(30))


def test_manual_seed_repeats_shuffling():
    ds = TensorDataset(braze.arange(30))
    braze.manual_seed(11)
    a = epoch(DataLoader(ds, batch_size=5, shuffle=True))
    braze.manual_seed(11)
    assert epoch(DataLoader(ds, batch_size=5, shuffle=True)) == a


def test_random_sampler_with_replacement_and_num_samples():
    g = braze.Generator().manual_seed(0)
    drawn = list(RandomSampler(range(4), replacement=True, num_samples=50, generator=g))
    assert len(drawn) == 50 and set(drawn) <= set(range(4))
    longer = list(RandomSampler(range(4), num_samples=10, generator=g))
    assert sorted(longer[:4]) == sorted(longer[4:8]) == [0, 1, 2, 3] and len(longer) == 10


def test_subset_random_sampler_permutes_the_indices():
    assert sorted(SubsetRandomSampler([5, 7, 9], generator=braze.Generator())) == [5, 7, 9]
    assert list(SequentialSampler(range(3))) == [0, 1, 2]


@pytest.mark.parametrize("lengths", [[3, 7], [0.3, 0.7], [0.5, 0.25, 0.25], [0.33, 0.33, 0.34]])
def test_random_split_lengths_equal_torchs_and_partition(lengths):
    parts = random_split(range(10), lengths, generator=braze.Generator().manual_seed(2))
    assert sorted(i for p in parts for i in p) == list(range(10))
    torch = pytest.importorskip("torch")
    assert [len(p) for p in parts] == [len(p) for p in torch.utils.data.random_split(range(10), lengths)]


def test_random_split_rejects_lengths_that_do_not_sum():
    with pytest.raises(ValueError, match="Sum of input lengths does not equal"):
        random_split(range(10), [3, 3])


def test_concat_and_subset_index_like_torch(torch):
    ours = ConcatDataset([list(range(3)), list(range(10, 14))])
    theirs = torch.utils.data.ConcatDataset([list(range(3)), list(range(10, 14))])
    assert [ours[i] for i in range(-7, 7)] == [theirs[i] for i in range(-7, 7)]
    assert len(ours) == 7 and list(Subset(ours, [6, 0])) == [13, 0]


def test_iterable_dataset_batches_its_stream():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(7))
    assert [b.tolist() for b in DataLoader(Stream(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.tolist() for b in DataLoader(Stream(), batch_size=3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]


# --- bad arguments ------------------------------------------------------------------------------------------------


def test_dataloader_over_an_object_without_getitem_raises():
    with pytest.raises(braze.BrazeError, match="the dataset \\(a object\\) has no __getitem__ or __len__"):
        DataLoader(object())


def test_dataloader_over_a_dataset_without_len_needs_a_sampler():
    class NoLen(Dataset):
        def __getitem__(self, i):
            return i
    with pytest.raises(braze.BrazeError, match="has no __len__"):
        DataLoader(NoLen())
    assert [b.tolist() for b in DataLoader(NoLen(), sampler=[2, 1], batch_size=2)] == [[2, 1]]


@pytest.mark.parametrize("kwargs, message", [
    ({"sampler": [0], "shuffle": True}, "sampler option is mutually exclusive with shuffle"),
    ({"batch_sampler": [[0]], "batch_size": 2}, "batch_sampler option is mutually exclusive"),
    ({"batch_size": None, "drop_last": True}, "mutually exclusive with drop_last"),
    ({"num_workers": -1}, "num_workers option should be non-negative"),
    ({"prefetch_factor": 2}, "prefetch_factor option could only be specified"),
])
def test_dataloader_rejects_conflicting_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataLoader(list(range(4)), **kwargs)


def test_iterable_dataset_rejects_shuffle_and_workers():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        DataLoader(Stream(), shuffle=True)
    with pytest.raises(braze.BrazeError, match="num_workers=2 with an IterableDataset is not supported"):
        DataLoader(Stream(), num_workers=2)


def test_tensor_dataset_rejects_mismatched_sizes():
    with pytest.raises(braze.BrazeError, match="size mismatch"):
        TensorDataset(braze.zeros(3), braze.zeros(4))


def test_default_collate_rejects_unknown_elements():
    with pytest.raises(TypeError, match="batch must contain tensors"):
        default_collate([object()])
