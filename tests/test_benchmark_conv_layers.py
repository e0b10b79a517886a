"""benchmarks/conv_layers.py's table: GFLOP/s = FLOPs / time, % of peak against the peak of that thread count."""
from __future__ import annotations

from benchmarks import conv_layers


def test_conv_layers_table_shows_gflops_percent_of_peak_and_the_picked_kernel() -> None:
    rows = [dict(batch=64, layer="32->64/2", threads=2, flops=2e9, im2col=40e-3, direct=20e-3, channels=10e-3,
                 picked="channels")]
    table = conv_layers.table(rows, {2: 200.0})
    assert "| 64 | 32->64/2 | 2 | 40000.0 (50, 25%) | 20000.0 (100, 50%) | 10000.0 (200, 100%) | channels |" in table
