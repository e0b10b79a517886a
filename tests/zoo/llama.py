import torch
import torch.nn as nn
import torch.nn.functional as F

# A LLaMA-style decoder: RMSNorm before attention and MLP (a hand-written RMSNorm module as in the original code,
# and nn.RMSNorm), rotary position embeddings from arange / outer / cos / sin (autocast off) applied by rotate-half,
# grouped-query attention whose key/value heads are shared through repeat_interleave, a causal mask from triu,
# a SwiGLU MLP, optional gradient checkpointing, and greedy decoding with a key/value cache. The zoo runs this text
# under torch and, with only the imports swapped, under braze.

import math
from dataclasses import dataclass


@dataclass
class ModelArgs:
    dim: int = 48
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 53
    hidden_dim: int = 96
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 16
    max_batch_size: int = 2


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        compute_dtype = torch.promote_types(x.dtype, torch.float32)  # at least float32 for the mean of squares
        return self._norm(x.to(compute_dtype)).type_as(x) * self.weight


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim, theta):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, seq_len):
        t = torch.arange(seq_len, device=x.device, dtype=self.inv_freq.dtype)
        device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
        with torch.autocast(device_type=device_type, enabled=False):  # keep the angles in full precision
            freqs = torch.outer(t, self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos = cos[None, None, :, :]
    sin = sin[None, None, :, :]
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim, args.rope_theta)
        # the key/value cache of incremental decoding, kept out of the state dict
        cache_shape = (args.max_batch_size, self.n_kv_heads, args.max_seq_len, self.head_dim)
        self.register_buffer("cache_k", torch.zeros(cache_shape), persistent=False)
        self.register_buffer("cache_v", torch.zeros(cache_shape), persistent=False)

    def forward(self, x, mask, start_pos=None):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        offset = 0 if start_pos is None else start_pos
        cos, sin = self.rotary(xv, offset + seqlen)
        xq, xk = apply_rotary_pos_emb(xq, xk, cos[offset:], sin[offset:])
        if start_pos is not None:
            self.cache_k = self.cache_k.to(xq)
            self.cache_v = self.cache_v.to(xq)
            self.cache_k[:bsz, :, start_pos: start_pos + seqlen] = xk
            self.cache_v[:bsz, :, start_pos: start_pos + seqlen] = xv
            xk = self.cache_k[:bsz, :, : start_pos + seqlen]
            xv = self.cache_v[:bsz, :, : start_pos + seqlen]

        keys = xk.repeat_interleave(self.n_rep, dim=1)
        values = torch.repeat_interleave(xv, self.n_rep, dim=1)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores, dim=-1).type_as(xq)
        output = torch.matmul(scores, values)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id, args):
        super().__init__()
        self.layer_id = layer_id
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, mask, start_pos=None):
        h = x + self.attention(self.attention_norm(x), mask, start_pos)
        return h + self.feed_forward(self.ffn_norm(h))


def causal_mask(seqlen, dtype):
    mask = torch.full((seqlen, seqlen), float("-inf"))
    return torch.triu(mask, diagonal=1).to(dtype)


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(i, args) for i in range(args.n_layers))
        self.norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.gradient_checkpointing = False

    def forward(self, tokens, start_pos=None):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        mask = None
        if seqlen > 1:
            mask = causal_mask(seqlen, h.dtype)
            if start_pos is not None:  # the cached keys before start_pos are all visible
                mask = torch.hstack([torch.zeros((seqlen, start_pos), device=tokens.device), mask]).type_as(h)
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                h = torch.utils.checkpoint.checkpoint(layer.__call__, h, mask, use_reentrant=False)
            else:
                h = layer(h, mask, start_pos)
        return self.output(self.norm(h))

    @torch.inference_mode()
    def generate(self, prompt_tokens, max_gen_len):
        """Greedy decoding with the key/value cache: the prompt in one step, then one token per step."""
        bsz, prompt_len = prompt_tokens.shape
        total_len = min(self.args.max_seq_len, prompt_len + max_gen_len)
        tokens = torch.full((bsz, total_len), 0, dtype=torch.long, device=prompt_tokens.device)
        tokens[:, :prompt_len] = prompt_tokens
        prev_pos = 0
        for cur_pos in range(prompt_len, total_len):
            logits = self.forward(tokens[:, prev_pos:cur_pos], prev_pos)
            tokens[:, cur_pos] = torch.argmax(logits[:, -1], dim=-1)
            prev_pos = cur_pos
        return tokens


class Block(nn.Module):
    """One decoder block on embeddings, building its own causal mask."""

    def __init__(self, args):
        super().__init__()
        self.block = TransformerBlock(0, args)

    def forward(self, x):
        return self.block(x, causal_mask(x.shape[1], x.dtype))
