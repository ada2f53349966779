"""Fast float32 matmuls for the few rows of a verify step on a CPU.

A verify pass multiplies 2-8 rows (the anchor and its drafts) by every weight matrix. `F.linear` computes that as
x @ W.T, and on some CPUs (MKL, float32) that small-row kernel is slow: one SmolLM2-135M forward over 2 tokens took
93 ms against 57 ms for one token, while the same products taken as (W @ x.T).T took 47 ms
(`benchmarks/verify_cost.py`). So while our engine runs, float32 CPU linear layers of the target and the drafter
take the faster layout for 2 to `MAX_ROWS` rows, where a one-time probe per weight shape says it is faster here.
One row (plain decoding steps) and long inputs (prefill) keep `F.linear`, so plain decoding is untouched; the
products are the same up to float rounding, as with any change of kernel.
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


def _small_row_linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    rows = x.numel() // x.shape[-1]
    if not 2 <= rows <= MAX_ROWS:
        return F.linear(x, module.weight, module.bias)
    y = (module.weight @ x.reshape(rows, x.shape[-1]).T).T.reshape(*x.shape[:-1], module.out_features)
    return y if module.bias is None else y + module.bias


COLD_BYTES = 64 * 2**20  # the probe cycles through this many bytes of weights: more than a CPU cache holds


@functools.cache
def weight_first_pays(in_features: int, out_features: int, threads: int) -> bool:
    """Whether (W @ x.T).T beats F.linear by 10% or more on this CPU for float32 products of this weight shape with
    2, 4 and 8 rows (median of 5 samples, once per shape and process). It depends on both: on a 2-core CPU the
    layout wins 3x for a 49152 x 576 LM head and loses with 1 thread.

    In a forward every weight comes from memory, not from the cache, so the probe cycles through distinct weights
    worth `COLD_BYTES`: timing one small weight over and over (hot in cache) picked the slower layout for
    SmolLM2's 576-wide layers in about half of the processes, and verify steps of 2-8 tokens then cost 1.4-1.5x
    a one-token step instead of 1.0-1.1x."""
    copies = max(1, COLD_BYTES // (4 * in_features * out_features))
    weights = torch.randn(copies, out_features, in_features)
    inputs = [torch.randn(rows, in_features) for rows in (2, 4, 8)]

    def median_seconds(product) -> float:
        samples = []
        for _ in range(6):  # the first sample warms up and is dropped
            start = time.perf_counter()
            for weight in weights:
                for x in inputs:
                    product(x, weight)
            samples.append(time.perf_counter() - start)
        return statistics.median(samples[1:])

    with torch.inference_mode():
        linear = median_seconds(lambda x, w: F.linear(x, w))
        weight_first = median_seconds(lambda x, w: (w @ x.T).T)
    return weight_first < 0.9 * linear


@contextlib.contextmanager
def small_row_linears(*models: nn.Module):
    """Within the block, float32 CPU `nn.Linear` layers of `models` compute 2..MAX_ROWS rows as (W @ x.T).T where
    that pays on this machine for their shape; every layer is restored on exit. Layers whose `forward` is already
    overridden on the instance (hooks of other libraries) are left alone."""
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
    layers = [m for m in layers if weight_first_pays(m.in_features, m.out_features, threads)]
    for layer in layers:
        layer.forward = functools.partial(_small_row_linear, layer)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


def with_small_row_linears(engine):
    """Decorator for an engine `(target, drafter, ...)`: run it inside `small_row_linears(target, drafter)`."""

    @functools.wraps(engine)
    def run(target, drafter, *args, **kwargs):
        with small_row_linears(target, drafter):
            return engine(target, drafter, *args, **kwargs)

    return run
