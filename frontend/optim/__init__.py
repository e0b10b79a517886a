"""braze.optim: SGD, Adam and AdamW as per-tensor rules, with two front ends sharing them.

- The module-system sequence: `optim = ModuleOptimizer(AdamConfig(...))`, then per step
  `grads = loss.backward(); gp = GradientsParams.from_grads(grads, model); model = optim.step(lr, model, gp)`.
  Parameter groups: `optim.add_group(ParamGroup..., SgdConfig(...), lr_scale=...)`. State: OptimizerRecord.
- torch style: `opt = Adam(model.parameters(), lr=1e-3); opt.zero_grad(); loss.backward(); opt.step()`,
  with param_groups, state_dict() and load_state_dict().
"""
from .module_optimizer import GradientsParams, ModuleOptimizer
from .record import OptimizerRecord
from .rules import AdamConfig, AdamWConfig, OptimizerConfig, SgdConfig, TensorState
from .state import ParamState
from .torch_style import SGD, Adam, AdamW, Optimizer

__all__ = ["GradientsParams", "ModuleOptimizer", "OptimizerRecord", "AdamConfig", "AdamWConfig", "OptimizerConfig",
           "SgdConfig", "TensorState", "ParamState", "SGD", "Adam", "AdamW", "Optimizer"]
