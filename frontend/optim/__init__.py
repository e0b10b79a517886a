"""braze.optim: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam and RAdam as per-tensor rules, with two
front ends sharing them, and braze.optim.lr_scheduler.

- The module-system sequence: `optim = ModuleOptimizer(AdamConfig(...))`, then per step
  `grads = loss.backward(); gp = GradientsParams.from_grads(grads, model); model = optim.step(lr, model, gp)`.
  Parameter groups: `optim.add_group(ParamGroup..., SgdConfig(...), lr_scale=...)`. State: OptimizerRecord.
- torch style: `opt = Adam(model.parameters(), lr=1e-3); opt.zero_grad(); loss.backward(); opt.step()`,
  with param_groups, add_param_group, state_dict() and load_state_dict() in torch's layout.
"""
from . import lr_scheduler
from .module_optimizer import GradientsParams, ModuleOptimizer
from .optimizer import Optimizer
from .options import OptionError
from .record import OptimizerRecord
from .rules import (AdadeltaConfig, AdagradConfig, AdamaxConfig, AdamConfig, AdamWConfig, NAdamConfig,
                    OptimizerConfig, RAdamConfig, RmsPropConfig, SgdConfig, TensorState)
from .state import ParamState
from .torch_style import SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, NAdam, RAdam, RMSprop

__all__ = ["lr_scheduler", "GradientsParams", "ModuleOptimizer", "Optimizer", "OptionError", "OptimizerRecord",
           "AdadeltaConfig", "AdagradConfig", "AdamaxConfig", "AdamConfig", "AdamWConfig", "NAdamConfig",
           "OptimizerConfig", "RAdamConfig", "RmsPropConfig", "SgdConfig", "TensorState", "ParamState", "SGD",
           "Adadelta", "Adagrad", "Adam", "Adamax", "AdamW", "NAdam", "RAdam", "RMSprop"]
