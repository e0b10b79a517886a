"""The per-tensor update rules of every optimizer, shared by ModuleOptimizer and the torch-style optimizers."""
from .adam import AdamaxConfig, AdamConfig, AdamWConfig, NAdamConfig, RAdamConfig
from .adaptive import AdadeltaConfig, AdagradConfig, RmsPropConfig
from .base import OptimizerConfig, StateLayout, TensorState
from .sgd import SgdConfig

CONFIGS: dict[str, type[OptimizerConfig]] = {c.name: c for c in (
    SgdConfig, AdamConfig, AdamWConfig, AdamaxConfig, NAdamConfig, RAdamConfig, RmsPropConfig, AdagradConfig,
    AdadeltaConfig)}

__all__ = ["AdamaxConfig", "AdamConfig", "AdamWConfig", "NAdamConfig", "RAdamConfig", "AdadeltaConfig",
           "AdagradConfig", "RmsPropConfig", "OptimizerConfig", "StateLayout", "TensorState", "SgdConfig", "CONFIGS"]
