"""DataLoader, as torch.utils.data.DataLoader: batches of a dataset in a sampler's order, collated.

With num_workers > 0 the samples of upcoming batches of a map-style dataset are fetched by that many worker
threads (not processes), prefetch_factor batches ahead per worker; batches arrive in sampler order and equal
those of num_workers=0. An IterableDataset is read in the calling thread only (num_workers must be 0).
"""
from __future__ import annotations

import itertools
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator

from braze.ir.errors import BrazeError

from ..creation import Generator
from .collate import default_collate, default_convert
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler


def _check_map_style(dataset: Any, needs_len: bool) -> None:
    """A map-style dataset needs __getitem__, and __len__ unless a sampler says which indices to read."""
    kind = type(dataset).__name__
    missing = [name for name, needed in (("__getitem__", True), ("__len__", needs_len))
               if needed and not hasattr(type(dataset), name)]
    if missing:
        raise BrazeError(f"DataLoader: the dataset (a {kind}) has no {' or '.join(missing)}; a map-style dataset "
                         f"defines __getitem__ and __len__ (subclass braze.utils.data.Dataset), an iterable one "
                         f"subclasses braze.utils.data.IterableDataset and defines __iter__")


class DataLoader:
    """Iterate over `dataset` in batches: the torch arguments, with worker threads for num_workers > 0."""

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Iterable[Any] | None = None, batch_sampler: Iterable[list[Any]] | None = None,
                 num_workers: int = 0, collate_fn: Callable[[Any], Any] | None = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn: Callable[[int], None] | None = None,
                 multiprocessing_context: Any = None, generator: Generator | None = None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False, pin_memory_device: str = "",
                 in_order: bool = True) -> None:
        _check_workers(num_workers, timeout, prefetch_factor, persistent_workers)
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            _check_iterable_options(shuffle, sampler, batch_sampler, num_workers)
        else:
            _check_map_style(dataset, sampler is None and batch_sampler is None)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)  # type: ignore[arg-type]
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.num_workers, self.prefetch_factor = num_workers, 2 if prefetch_factor is None else prefetch_factor
        self.worker_init_fn, self.timeout, self.pin_memory = worker_init_fn, timeout, pin_memory
        self.collate_fn = collate_fn or (default_collate if self._auto_collation else default_convert)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None or (isinstance(self.dataset, IterableDataset)
                                                  and self.batch_size is not None)

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)  # type: ignore[arg-type]
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)  # type: ignore

    def __iter__(self) -> Iterator[Any]:
        if isinstance(self.dataset, IterableDataset):
            return self._iterate_stream()
        keys = self.batch_sampler if self.batch_sampler is not None else self.sampler
        if self.num_workers == 0:
            return (self._fetch(key) for key in keys)  # type: ignore[union-attr]
        return self._iterate_threaded(iter(keys))  # type: ignore[arg-type]

    def _fetch(self, key: Any) -> Any:
        """One batch (a list of indices, collated) or, without auto-collation, one converted sample."""
        if not self._auto_collation:
            return self.collate_fn(self.dataset[key])
        getitems = getattr(self.dataset, "__getitems__", None)
        samples = getitems(key) if getitems is not None else [self.dataset[i] for i in key]
        return self.collate_fn(samples)

    def _iterate_threaded(self, keys: Iterator[Any]) -> Iterator[Any]:
        ids = itertools.count()
        init = None if self.worker_init_fn is None else (lambda: self.worker_init_fn(next(ids)))  # type: ignore
        with ThreadPoolExecutor(self.num_workers, thread_name_prefix="braze-data", initializer=init) as pool:
            pending = deque(pool.submit(self._fetch, k) for k in itertools.islice(keys, self.num_workers
                                                                                   * self.prefetch_factor))
            while pending:
                batch = pending.popleft().result(timeout=self.timeout or None)
                for k in itertools.islice(keys, 1):
                    pending.append(pool.submit(self._fetch, k))
                yield batch

    def _iterate_stream(self) -> Iterator[Any]:
        if self.batch_size is None:
            yield from (self.collate_fn(sample) for sample in self.dataset)
            return
        batch: list[Any] = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)


def _check_workers(num_workers: int, timeout: float, prefetch_factor: int | None, persistent_workers: bool) -> None:
    if num_workers < 0:
        raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 to "
                         "enable multiprocessing, otherwise set prefetch_factor to None.")
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")


def _check_iterable_options(shuffle: Any, sampler: Any, batch_sampler: Any, num_workers: int) -> None:
    for name, value in (("shuffle", shuffle), ("sampler", sampler), ("batch_sampler", batch_sampler)):
        if value not in (None, False):
            raise ValueError(f"DataLoader with IterableDataset: expected unspecified {name} option, but got "
                             f"{name}={value}")
    if num_workers:
        raise BrazeError(f"DataLoader: num_workers={num_workers} with an IterableDataset is not supported (braze "
                         f"reads iterable datasets in the calling thread); use num_workers=0")
