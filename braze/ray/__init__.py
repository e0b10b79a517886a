"""braze on Ray: batch inference over Ray Data datasets and online serving with Ray Serve, from a .braze artifact.

    ds.map_batches(braze.ray.predictor("model.braze"), batch_format="numpy", concurrency=4)
    serve.run(braze.ray.deployment("model.braze", num_replicas=2), route_prefix="/")

Needs `pip install 'braze[ray]'`. `import braze` never imports this package; this package imports ray only inside
the functions that need it, so its request parsing and row batching work without ray.
"""
from __future__ import annotations

from braze.ray.batch import Predictor, predictor
from braze.ray.serving import deployment

__all__ = ["Predictor", "predictor", "deployment"]
