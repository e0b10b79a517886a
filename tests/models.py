"""Model definitions shared by the tracing, pass and compilation tests."""
from __future__ import annotations

from typing import Any

import braze.nn as nn
import braze.nn.functional as F


class MLP(nn.Module):
    """Two linear layers with ReLU and dropout between them."""

    def __init__(self, d_in: int = 8, hidden: int = 16, d_out: int = 4, p: float = 0.25) -> None:
        super().__init__()
        self.fc1, self.drop, self.fc2 = nn.Linear(d_in, hidden), nn.Dropout(p), nn.Linear(hidden, d_out)

    def forward(self, x: Any) -> Any:
        return self.fc2(self.drop(F.relu(self.fc1(x))))


class SmallCNN(nn.Module):
    """The benchmark CNN's layer kinds at a size that compiles quickly: a strided padded conv, batch norm, ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 10)

    def forward(self, x: Any) -> Any:
        return self.fc(F.relu(self.b1(self.c1(x))).mean(dim=(2, 3)))
