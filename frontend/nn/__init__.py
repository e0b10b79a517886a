"""braze.nn: neural-network building blocks; `functional` holds the stateless layer functions."""
from . import functional, init, utils
from .flag import Flag
from .group import ParamGroup
from .module import Module
from .param import Param, ParamId, ParamMapper
from .state import IncompatibleKeys
from .visitor import ModuleMapper, ModuleVisitor

Parameter = Param  # torch's name, so `nn.Parameter(torch.randn(...))` code reads across unchanged
from .layers import (GELU, AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv2d, CrossEntropyLoss, Dropout,
                     Embedding, Flatten, Identity, LayerNorm, Linear, MaxPool2d, ModuleDict, ModuleList, MSELoss,
                     MultiheadAttention, ReLU, Sequential, Sigmoid, SiLU, Softmax, Tanh, TransformerEncoderLayer)
from .lora import Lora, LoraAdapter, QLora
from .quant import QuantizedTensor, Quantizer
from .reparam import Reparameterization, Reparameterizer
