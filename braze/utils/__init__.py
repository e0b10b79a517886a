"""braze.utils: the counterparts of torch.utils; `braze.utils.data` is braze.frontend.data."""
from braze.frontend import data

__all__ = ["data"]
