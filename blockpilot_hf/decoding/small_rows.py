"""Fast float32 matmuls for the few rows of a decoding step on a CPU.

A verify pass multiplies 2-8 rows (the anchor and its drafts) by every weight matrix, a plain step 1 row.
`F.linear` computes that as x @ W.T, and on some CPUs (MKL, float32) those small-row kernels are slow: one
SmolLM2-135M forward over 2 tokens took 93 ms against 57 ms for one token, while the same products taken as
(W @ x.T).T took 47 ms (`benchmarks/verify_cost.py`). One row is slow too: x @ W.T with one row runs MKL's
matrix-vector kernel, which here was 2-3x slower than the matrix product with two right-hand columns, so a single
row is computed twice as such a product and one copy kept. While our engine runs, float32 CPU linear layers of
the target and the drafter take that layout for the row counts where a one-time probe per weight shape and row
bucket (1 row, 2-`MAX_ROWS` rows) says it is faster here. Long inputs (the prefill) keep `F.linear`, and plain
`generate` outside the engine is untouched; the products are the same up to float rounding, as with any change of
kernel.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

MAX_ROWS = 8  # above this, x @ W.T is as fast (measured up to 17 rows)
# Row counts that share one probe decision, with the row counts the probe times for them. One row and 2-8 rows
# run different kernels; a third bucket for 5-8 rows flipped between processes on SmolLM2 and moved no
# end-to-end step time, so 2-8 rows share one.
ROW_BUCKETS: tuple[tuple[range, tuple[int, ...]], ...] = (
    (range(1, 2), (1,)),
    (range(2, MAX_ROWS + 1), (2, 4, 8)),
)
COLD_BYTES = 64 * 2**20  # the probe cycles through this many bytes of weights: more than a CPU cache holds
MAX_COPIES = 256  # ... but through no more weights than this (tiny test models), so that it stays quick


def weight_first(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x @ weight.T for a (rows, in) `x`, computed as (weight @ x.T).T; one row goes in twice (see the module)."""
    if x.shape[0] == 1:
        return (weight @ x.expand(2, -1).contiguous().T)[:, :1].T
    return (weight @ x.T).T


def _small_row_linear(module: nn.Linear, fast_rows: frozenset[int], x: torch.Tensor) -> torch.Tensor:
    rows = x.numel() // x.shape[-1]
    if rows not in fast_rows:
        return F.linear(x, module.weight, module.bias)
    y = weight_first(module.weight, x.reshape(rows, x.shape[-1])).reshape(*x.shape[:-1], module.out_features)
    return y if module.bias is None else y + module.bias


@functools.cache
def fast_rows(in_features: int, out_features: int, threads: int) -> frozenset[int]:
    """The row counts for which `weight_first` beats F.linear by 10% or more on this CPU for float32 products of
    this weight shape: probed once per shape and process, per row bucket (median of 4 interleaved samples). It
    depends on the shape, the rows and the threads: on a 2-core CPU the layout wins 3x for a 49152 x 576 LM head
    at 2 rows and loses with 1 thread.

    In a forward every weight comes from memory, not from the cache, so the probe cycles through distinct weights
    worth `COLD_BYTES`: timing one small weight over and over (hot in cache) picked the slower layout for
    SmolLM2's 576-wide layers in about half of the processes, and verify steps of 2-8 tokens then cost 1.4-1.5x
    a one-token step instead of 1.0-1.1x. The two layouts alternate sample by sample, so a change of load
    during the probe falls on both."""
    copies = min(MAX_COPIES, max(1, COLD_BYTES // (4 * in_features * out_features)))
    weights = torch.randn(copies, out_features, in_features)

    def seconds(product, inputs: list[torch.Tensor]) -> float:
        start = time.perf_counter()
        for weight in weights:
            for x in inputs:
                product(weight, x)
        return time.perf_counter() - start

    def pays(rows: tuple[int, ...]) -> bool:
        inputs = [torch.randn(n, in_features) for n in rows]
        linear, layout = [], []
        for _ in range(5):  # the first pair warms up and is dropped
            linear.append(seconds(lambda w, x: F.linear(x, w), inputs))
            layout.append(seconds(weight_first, inputs))
        return statistics.median(layout[1:]) < 0.9 * statistics.median(linear[1:])

    with torch.inference_mode():
        return frozenset(n for bucket, probed in ROW_BUCKETS if pays(probed) for n in bucket)


@contextlib.contextmanager
def small_row_linears(*models: nn.Module):
    """Within the block, float32 CPU `nn.Linear` layers of `models` compute 1..MAX_ROWS rows as `weight_first`
    where that pays on this machine for their shape and row count; every layer is restored on exit. Layers whose
    `forward` is already overridden on the instance (hooks of other libraries) are left alone."""
    layers = [
        m
        for model in models
        for m in model.modules()
        if type(m) is nn.Linear
        and "forward" not in m.__dict__
        and m.weight.dtype == torch.float32
        and m.weight.device.type == "cpu"
    ]
    threads = torch.get_num_threads()
    patched = []
    for layer in layers:
        rows = fast_rows(layer.in_features, layer.out_features, threads)
        if rows:
            layer.forward = functools.partial(_small_row_linear, layer, rows)
            patched.append(layer)
    try:
        yield
    finally:
        for layer in patched:
            del layer.forward


def with_small_row_linears(engine):
    """Decorator for an engine `(target, drafter, ...)`: run it inside `small_row_linears(target, drafter)`."""

    @functools.wraps(engine)
    def run(target, drafter, *args, **kwargs):
        with small_row_linears(target, drafter):
            return engine(target, drafter, *args, **kwargs)

    return run
