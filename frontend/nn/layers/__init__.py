"""The standard layers, torch-compatible in constructor arguments, parameter names, initialization and outputs."""
from .activation import GELU, Flatten, ReLU, SiLU, Sigmoid, Softmax, Tanh
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv2d
from .dropout import Dropout
from .embedding import Embedding
from .linear import Identity, Linear
from .loss import CrossEntropyLoss, MSELoss
from .normalization import BatchNorm1d, BatchNorm2d, LayerNorm
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .transformer import TransformerEncoderLayer

__all__ = ["Linear", "Identity", "Conv2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "Dropout", "Embedding",
           "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "Flatten", "MaxPool2d", "AvgPool2d",
           "AdaptiveAvgPool2d", "Sequential", "ModuleList", "ModuleDict", "MultiheadAttention",
           "TransformerEncoderLayer", "CrossEntropyLoss", "MSELoss"]
