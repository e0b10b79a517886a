import torch
import torch.nn as nn
import torch.nn.functional as F


def sincos_2d(h, w, dim, temperature=10000.0):
    """Fixed 2-D sine-cosine position embeddings of an h x w grid of patches (as in simple ViTs)."""
    y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    omega = torch.arange(dim // 4) / (dim // 4 - 1)
    omega = 1.0 / (temperature ** omega)
    y = y.flatten()[:, None] * omega[None, :]
    x = x.flatten()[:, None] * omega[None, :]
    return torch.cat((x.sin(), x.cos(), y.sin(), y.cos()), dim=1)


class PatchEmbed(nn.Module):
    """Cuts images into non-overlapping patches with F.unfold and projects each one."""

    def __init__(self, patch=4, in_chans=3, dim=32):
        super().__init__()
        self.patch = patch
        self.proj = nn.Linear(in_chans * patch * patch, dim)

    def forward(self, x):
        patches = F.unfold(x, kernel_size=self.patch, stride=self.patch)
        return self.proj(patches.transpose(1, 2))


class CosineNet(nn.Module):
    """Patch tokens, one residual MLP block, and a cosine classifier against learned class prototypes."""

    def __init__(self, image_size=16, patch=4, dim=32, num_classes=5):
        super().__init__()
        self.embed = PatchEmbed(patch, 3, dim)
        n = image_size // patch
        self.register_buffer("pos", sincos_2d(n, n, dim))
        self.block = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 64), nn.SELU(), nn.Linear(64, dim))
        self.prototypes = nn.Parameter(torch.randn(num_classes, dim))
        self.logit_scale = nn.Parameter(torch.tensor(2.3))

    def forward(self, x):
        tokens = self.embed(x) + self.pos
        tokens = tokens + self.block(tokens)
        feat = tokens.mean(dim=1)
        feat = feat / feat.norm(dim=-1, keepdim=True)
        sims = F.cosine_similarity(feat.unsqueeze(1), self.prototypes.unsqueeze(0), dim=-1)
        return sims * self.logit_scale.exp()


class SiameseNet(nn.Module):
    """Shared GRU-cell encoder of two sequences; the logits of "same pair" fall with their distance."""

    def __init__(self, in_dim=6, hidden=10):
        super().__init__()
        self.cell = nn.GRUCell(in_dim, hidden)
        self.head = nn.Linear(hidden, hidden)
        self.bias = nn.Parameter(torch.tensor(1.0))

    def encode(self, seq):
        h = torch.zeros(seq.shape[0], self.cell.hidden_size, dtype=seq.dtype)
        for t in range(seq.shape[1]):
            h = self.cell(seq[:, t], h)
        return self.head(h)

    def forward(self, a, b):
        d = F.pairwise_distance(self.encode(a), self.encode(b))
        return self.bias - d
