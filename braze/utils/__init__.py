"""braze.utils: the counterparts of torch.utils; `braze.utils.data` is braze.frontend.data and
`braze.utils.checkpoint` braze.frontend.checkpoint."""
from braze.frontend import checkpoint, data

__all__ = ["checkpoint", "data"]
