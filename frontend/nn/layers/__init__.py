"""The standard layers, torch-compatible in constructor arguments, parameter names, initialization and outputs."""
from . import activation, attention, container, conv, distance, dropout, embedding, linear, loss, normalization, \
    pooling, recurrent, resize, sampling, transformer, transformer_stack
from .activation import *  # noqa: F403
from .attention import *  # noqa: F403
from .container import *  # noqa: F403
from .conv import *  # noqa: F403
from .distance import *  # noqa: F403
from .dropout import *  # noqa: F403
from .embedding import *  # noqa: F403
from .linear import *  # noqa: F403
from .loss import *  # noqa: F403
from .normalization import *  # noqa: F403
from .pooling import *  # noqa: F403
from .recurrent import *  # noqa: F403
from .resize import *  # noqa: F403
from .sampling import *  # noqa: F403
from .transformer import *  # noqa: F403
from .transformer_stack import *  # noqa: F403

_MODULES = (linear, conv, normalization, dropout, embedding, activation, pooling, resize, recurrent, container,
            attention, transformer, transformer_stack, loss, distance, sampling)
__all__ = [name for module in _MODULES for name in module.__all__]
