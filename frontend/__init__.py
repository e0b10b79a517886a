"""braze.frontend: the eager Tensor with reverse-mode autodiff, torch-style tensor functions and braze.nn."""
from .tensor import Tensor
from .autodiff import Gradients, enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .dispatch import apply, intercept
from .creation import *  # noqa: F403
from .creation import __all__ as _creation_all
from .functions import *  # noqa: F403
from .functions import __all__ as _functions_all
from .assignment import *  # noqa: F403
from .assignment import __all__ as _assignment_all
from .data_dependent import *  # noqa: F403
from .data_dependent import __all__ as _data_dependent_all
from .math_functions import *  # noqa: F403
from .math_functions import __all__ as _math_all
from .linalg import *  # noqa: F403
from .linalg import __all__ as _linalg_all
from .elementary import *  # noqa: F403
from .elementary import __all__ as _elementary_all
from .pointwise import *  # noqa: F403
from .pointwise import __all__ as _pointwise_all
from .reductions import *  # noqa: F403
from .reductions import __all__ as _reductions_all
from .arrangement import *  # noqa: F403
from .arrangement import __all__ as _arrangement_all
from .binning import *  # noqa: F403
from .binning import __all__ as _binning_all
from .namespace import *  # noqa: F403
from .namespace import __all__ as _namespace_all
from .type_queries import *  # noqa: F403
from .type_queries import __all__ as _type_queries_all
from .device import Device as device
from .size import Size
from . import nn
from . import amp
from . import cuda
from .amp import autocast, is_autocast_enabled
from .records import ModuleRecord, RecordEntry
from .torch_pickle import load_torch_state_dict
from .trace import trace
from .lazy_modules import lazy_submodules

__getattr__ = lazy_submodules(globals(), {"optim": "braze.frontend.optim"})

__all__ = ["Tensor", "Gradients", "enable_grad", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled",
           "apply", "intercept", "nn", "amp", "cuda", "autocast", "is_autocast_enabled", "device", "Size",
           "ModuleRecord", "RecordEntry", "load_torch_state_dict", "trace",
           *_creation_all, *_functions_all, *_linalg_all, *_namespace_all, *_assignment_all, *_data_dependent_all,
           *_math_all, *_type_queries_all, *_elementary_all, *_pointwise_all, *_reductions_all, *_arrangement_all,
           *_binning_all]
