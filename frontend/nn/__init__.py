"""braze.nn: neural-network building blocks; `functional` holds the stateless layer functions."""
from . import functional, init, utils
from .flag import Flag
from .group import ParamGroup
from .module import Module
from .param import Param, ParamId, ParamMapper
from .state import IncompatibleKeys
from .visitor import ModuleMapper, ModuleVisitor

Parameter = Param  # torch's name, so `nn.Parameter(torch.randn(...))` code reads across unchanged
from .layers import *  # noqa: E402,F403  (every layer: nn.Linear, nn.Conv2d, nn.GroupNorm, ...)
from .lora import Lora, LoraAdapter, QLora
from .quant import QuantizedTensor, Quantizer
from .reparam import Reparameterization, Reparameterizer
