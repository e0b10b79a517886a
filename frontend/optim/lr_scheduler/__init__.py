"""braze.optim.lr_scheduler: torch's learning-rate schedulers, for torch-style optimizers or bare learning rates."""
from .annealing import CosineAnnealingLR, CosineAnnealingWarmRestarts
from .base import LearningRates, LRScheduler
from .composite import ChainedScheduler, SequentialLR
from .cyclic import CyclicLR, OneCycleLR
from .multiplicative import (ConstantLR, ExponentialLR, LambdaLR, LinearLR, MultiplicativeLR, MultiStepLR,
                             PolynomialLR, StepLR)
from .plateau import ReduceLROnPlateau

__all__ = ["LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR",
           "SequentialLR", "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR",
           "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR", "LRScheduler", "LearningRates"]
