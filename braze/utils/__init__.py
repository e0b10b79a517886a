"""braze.utils: the counterparts of torch.utils; `braze.utils.data` is braze.frontend.data and
`braze.utils.checkpoint` braze.frontend.checkpoint, each imported when first used."""
from braze.frontend.lazy_modules import lazy_submodules

__getattr__ = lazy_submodules(globals(), {"data": "braze.frontend.data", "checkpoint": "braze.frontend.checkpoint"})

__all__ = ["checkpoint", "data"]
