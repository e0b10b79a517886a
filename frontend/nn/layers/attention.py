"""MultiheadAttention, as torch.nn.MultiheadAttention: parameter names, initialization, masks and outputs."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from braze.ir.errors import ShapeError
from braze.ir.types import bool_

from ... import functions as _f
from ...tensor import Tensor
from .. import functional as F
from ..flag import Flag
from ..module import Module
from ._init import constant, float_dtype, lazy, normal, uniform, xavier_bound
from .linear import NonDynamicallyQuantizableLinear


class MultiheadAttention(Module):
    """Multi-head scaled dot-product attention with input and output projections.

    Parameters as torch: in_proj_weight (3E, E) xavier-uniform and in_proj_bias (3E) zeros when key and value
    have the query's width (else q_proj_weight, k_proj_weight, v_proj_weight), out_proj a Linear whose bias is
    zeroed, and bias_k/bias_v (1, 1, E) xavier-normal with add_bias_kv. Attention-weight dropout follows the
    `training` flag. Masks follow torch: a bool mask is True where attention is NOT allowed, a float mask is
    added to the scores.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim must be divisible by num_heads, got {embed_dim} and {num_heads}")
        d = float_dtype(dtype, "MultiheadAttention")
        self.embed_dim, self.num_heads, self.head_dim = int(embed_dim), int(num_heads), embed_dim // num_heads
        self.kdim = int(kdim) if kdim is not None else self.embed_dim
        self.vdim = int(vdim) if vdim is not None else self.embed_dim
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        self.dropout, self.batch_first, self.add_zero_attn = float(dropout), bool(batch_first), bool(add_zero_attn)
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = lazy((3 * e, e), uniform(xavier_bound(e, 3 * e)), d, device)
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = lazy((e, e), uniform(xavier_bound(e, e)), d, device)
            self.k_proj_weight = lazy((e, self.kdim), uniform(xavier_bound(self.kdim, e)), d, device)
            self.v_proj_weight = lazy((e, self.vdim), uniform(xavier_bound(self.vdim, e)), d, device)
        self.register_parameter("in_proj_bias", lazy((3 * e,), constant(0.0), d, device) if bias else None)
        self.out_proj = NonDynamicallyQuantizableLinear(e, e, bias=bias, device=device, dtype=d)
        if bias:
            self.out_proj.bias = lazy((e,), constant(0.0), d, device)
        if add_bias_kv:  # xavier_normal on (1, 1, E): fan_in = fan_out = E
            self.bias_k = lazy((1, 1, e), normal(math.sqrt(2.0 / (2 * e))), d, device)
            self.bias_v = lazy((1, 1, e), normal(math.sqrt(2.0 / (2 * e))), d, device)
        else:
            self.register_parameter("bias_k", None)
            self.register_parameter("bias_v", None)
        self.training = Flag(True)

    # --- projections --------------------------------------------------------------------------------------

    def _projections(self, query: Any, key: Any, value: Any) -> tuple[Any, Any, Any]:
        """The projected q, k, v (batch, length, E)."""
        e, b = self.embed_dim, self.in_proj_bias
        if self._qkv_same_embed_dim and query is key and key is value:  # self-attention: one matmul for all three
            return _f.chunk(F.linear(query, self.in_proj_weight, b), 3, -1)  # type: ignore[return-value]
        if self._qkv_same_embed_dim:
            weights = [_f.narrow(self.in_proj_weight, 0, i * e, e) for i in range(3)]
        else:
            weights = [self.q_proj_weight, self.k_proj_weight, self.v_proj_weight]
        biases = [None] * 3 if b is None else [_f.narrow(b, 0, i * e, e) for i in range(3)]
        return tuple(F.linear(x, w, bb) for x, w, bb in zip((query, key, value), weights, biases))  # type: ignore

    # --- masks --------------------------------------------------------------------------------------------

    def _score_mask(self, mask: Any, batch: int, tgt: int, src: int, batched: bool, what: str) -> Tensor | None:
        """attn_mask (L, S) or (N*H, L, S) as a mask over the (N, H, L, S) scores."""
        if mask is None:
            return None
        m = _f.as_tensor(mask)
        heads = self.num_heads
        if m.ndim == 2:
            if m.shape != (tgt, src):
                raise ShapeError(f"MultiheadAttention: the shape of the 2D {what} is {m.shape}, but should be "
                                 f"{(tgt, src)}")
            return m
        expected = (batch * heads, tgt, src) if batched else (heads, tgt, src)
        if m.ndim != 3 or m.shape != expected:
            raise ShapeError(f"MultiheadAttention: the shape of the {m.ndim}D {what} is {m.shape}, but should be "
                             f"{expected}")
        return _f.reshape(m, (batch, heads, tgt, src))

    @staticmethod
    def _padding_mask(mask: Any, batch: int, src: int, batched: bool) -> Tensor | None:
        """key_padding_mask (N, S), or (S,) unbatched, as a mask over the (N, H, L, S) scores."""
        if mask is None:
            return None
        m = _f.as_tensor(mask)
        expected = (batch, src) if batched else (src,)
        if m.shape != expected:
            raise ShapeError(f"MultiheadAttention: expected key_padding_mask of shape {expected}, got {m.shape}")
        return _f.reshape(m, (batch, 1, 1, src))

    @staticmethod
    def _apply_mask(scores: Any, mask: Tensor | None) -> Any:
        if mask is None:
            return scores
        if mask.dtype == bool_:
            return _f.masked_fill(scores, mask, -math.inf)
        return _f.add(scores, _f.to_dtype(mask, scores.dtype))

    # --- forward ------------------------------------------------------------------------------------------

    def _check_inputs(self, query: Any, key: Any, value: Any) -> bool:
        """Validate ranks and widths; True for batched (3-d) inputs."""
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ShapeError(f"MultiheadAttention: query, key and value must all be 3-d (batched) or 2-d "
                             f"(unbatched), got shapes {query.shape}, {key.shape}, {value.shape}")
        for name, t, width in (("query", query, self.embed_dim), ("key", key, self.kdim), ("value", value, self.vdim)):
            if t.shape[-1] != width:
                raise ShapeError(f"MultiheadAttention: expected {name} of width {width}, got shape {t.shape}")
        if key.shape[:-1] != value.shape[:-1]:
            raise ShapeError(f"MultiheadAttention: key shape {key.shape} does not match value shape {value.shape}")
        return batched

    def _to_batch_first(self, x: Any, batched: bool) -> Any:
        if not batched:
            return _f.unsqueeze(x, 0)
        return x if self.batch_first else _f.transpose(x, 0, 1)

    def forward(self, query: Any, key: Any, value: Any, key_padding_mask: Any = None, need_weights: bool = True,
                attn_mask: Any = None, average_attn_weights: bool = True, is_causal: bool = False) -> tuple[Any, Any]:
        """(output, attention weights averaged over heads (or per head), or None when need_weights is False).

        is_causal without attn_mask applies the causal mask; with attn_mask it is a hint, as torch.
        """
        batched = self._check_inputs(query, key, value)
        same = query is key and key is value
        q_in = self._to_batch_first(query, batched)
        k_in = q_in if same else self._to_batch_first(key, batched)
        v_in = q_in if same else self._to_batch_first(value, batched)
        n, tgt, src = q_in.shape[0], q_in.shape[1], k_in.shape[1]
        q, k, v = self._projections(q_in, k_in, v_in)
        attn = self._score_mask(attn_mask, n, tgt, src, batched, "attn_mask")
        if attn is None and is_causal:
            attn = Tensor._wrap(np.triu(np.ones((tgt, src), dtype=bool), 1))
        pad = self._padding_mask(key_padding_mask, n, src, batched)
        if self.bias_k is not None:  # one learned key/value appended to every sequence
            k = _f.cat([k, _f.broadcast_to(self.bias_k, (n, 1, self.embed_dim))], 1)
            v = _f.cat([v, _f.broadcast_to(self.bias_v, (n, 1, self.embed_dim))], 1)
            attn, pad = _extend(attn), _extend(pad)
        h, hd = self.num_heads, self.head_dim
        q, k, v = (_f.transpose(_f.reshape(t, (n, t.shape[1], h, hd)), 1, 2) for t in (q, k, v))
        if self.add_zero_attn:  # one all-zero key/value appended per head
            k, v = (_f.cat([t, Tensor._wrap(np.zeros((n, h, 1, hd), dtype=t.dtype.numpy))], 2) for t in (k, v))
            attn, pad = _extend(attn), _extend(pad)
        scores = _f.matmul(_f.mul(q, 1.0 / math.sqrt(hd)), _f.transpose(k, -2, -1))  # (n, h, tgt, src')
        scores = self._apply_mask(self._apply_mask(scores, attn), pad)
        weights = _f.softmax(scores, -1)
        if self.dropout > 0.0:
            weights = F.dropout(weights, self.dropout, training=self.flag("training"))
        out = _f.reshape(_f.transpose(_f.matmul(weights, v), 1, 2), (n, tgt, self.embed_dim))
        out = self.out_proj(out)
        out = _f.squeeze(out, 0) if not batched else (out if self.batch_first else _f.transpose(out, 0, 1))
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = _f.mean(weights, 1)
        return out, (weights if batched else _f.squeeze(weights, 0))


def _extend(mask: Tensor | None) -> Tensor | None:
    """A mask over the scores widened by one source position that every query may attend to."""
    if mask is None:
        return None
    return F.pad(mask, (0, 1))  # zeros: False for a bool mask


__all__ = ["MultiheadAttention"]
