"""Batch inference over a dataset with Ray Data, from a .braze artifact.

1. A small classifier is exported as one .braze file, compiled for a batch of 64 rows.
2. A local Ray instance (2 CPUs) and a synthetic dataset of 19,200 rows of 32 features.
3. `dataset.map_batches(braze.ray.predictor(path), ...)` runs the artifact in 2 actors: each loads and compiles it
   once (the second from the disk cache) and runs its batches with one thread per CPU Ray gave it; batches of
   1,000 rows run as calls of 64 rows, the last one padded.
4. The scores equal braze.load(path) run locally on the same rows.

Run: python examples/ray_batch_inference.py   (needs pip install 'braze[ray]'; tens of seconds, mostly Ray start-up)

The same code on a cluster (not run here): connect to it instead of starting Ray, put the artifact where every node
can read it, read the dataset from storage and give each actor more CPUs:

    ray.init(address="auto")                      # on a cluster node; or RAY_ADDRESS=ray://head:10001 from outside
    path = "/mnt/shared/models/classifier.braze"  # NFS, a mounted bucket: the same path on every node
    dataset = ray.data.read_parquet("s3://bucket/features/")     # a column named as the artifact's input
    scored = dataset.map_batches(braze.ray.predictor(path), batch_format="numpy", batch_size=4096,
                                 concurrency=(2, 32), num_cpus=4)  # 2 to 32 actors, 4 threads each
    scored.write_parquet("s3://bucket/scores/")

Each node compiles the artifact once into its own cache (BRAZE_CACHE_DIR, default ~/.cache/braze); its other actors
load the compiled code from there.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray

import braze
import braze.nn as nn
import braze.nn.functional as F
import braze.ray

ROWS, FEATURES, BATCH = 19_200, 32, 64  # 300 compiled batches


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(FEATURES, 64), nn.Linear(64, 10)

    def forward(self, features: Any) -> Any:
        return F.softmax(self.fc2(F.relu(self.fc1(features))), dim=-1)


def main() -> None:
    braze.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "classifier.braze"
        manifest = braze.export(Classifier().eval(), path, np.zeros((BATCH, FEATURES), np.float32))
        (column,) = (spec["name"] for spec in manifest["outputs"])
        print(f"1. exported {path.name}: inputs {manifest['inputs']}, outputs {manifest['outputs']}")

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            features = np.random.default_rng(0).standard_normal((ROWS, FEATURES)).astype(np.float32)
            # an id column passes through map_batches: actors may finish batches out of order, the ids restore it
            dataset = ray.data.from_items([{"id": i, "features": row} for i, row in enumerate(features)])
            print(f"2. a local Ray instance and a dataset of {dataset.count()} rows")

            start = time.perf_counter()
            scored = dataset.map_batches(braze.ray.predictor(path), batch_format="numpy", batch_size=1000,
                                         concurrency=2)
            batches = list(scored.iter_batches(batch_format="numpy", batch_size=None))
            ids = np.concatenate([b["id"] for b in batches])
            scores = np.concatenate([b[column] for b in batches])[np.argsort(ids)]
            seconds = time.perf_counter() - start
            print(f"3. map_batches with 2 actors: {len(scores)} rows in {seconds:.1f} s (actor start-up included)")
        finally:
            ray.shutdown()

        compiled = braze.load(path)
        local = np.concatenate([compiled(features[k:k + BATCH]) for k in range(0, ROWS, BATCH)])
        print(f"4. max |ray - local| = {np.abs(scores - local).max():.2e}; predicted classes "
              f"{np.bincount(scores.argmax(1), minlength=10).tolist()}")


if __name__ == "__main__":
    main()
