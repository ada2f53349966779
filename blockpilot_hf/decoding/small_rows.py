"""Fast float32 matmuls for the few rows of a decoding step on a CPU.

A verify pass multiplies 2-32 rows (the anchor and its drafts) by every weight matrix, a plain step 1 row.
`F.linear` computes that as x @ W.T, and on some CPUs (MKL on this AMD EPYC, float32) those small-row kernels are
slow: one SmolLM2-135M forward over 8 tokens cost 1.7x one over 1 token, though both read the same weights. Two
other kernels do better for some row counts:

- "columns": (W @ x.T).T, one row going in twice and one copy kept (x @ W.T with one row runs MKL's
  matrix-vector kernel, 2-3x slower per weight here). Fastest for 1-4 rows.
- "packed": oneDNN's linear on a copy of W reordered once into its blocked layout (what `torch.compile` uses on
  CPUs). Its cost barely grows from 3 to 32 rows: an 8-token SmolLM2 forward took 86 ms against
  131 ms with F.linear (`benchmarks/verify_cost.py`).

While our engine runs, float32 CPU linear layers of the target and the drafter (its head too) take, per row
bucket (1, 2-4, 5-`MAX_ROWS` rows), the kernel a one-time probe per weight shape found fastest here. Packed
copies are made once per weight and kept (one more copy of those weights in memory), and only while they fit in
half of the memory available. Long inputs (the prefill) keep `F.linear`, and plain `generate` outside the engine
is untouched; the products are the same up to float rounding, as with any change of kernel.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
import weakref
from collections.abc import Callable

import psutil
import torch
import torch.nn.functional as F
from torch import nn

MAX_ROWS = 32  # the largest verify pass the buckets cover; longer inputs (the prefill) keep F.linear
# Row counts that share one probe decision, with the row counts the probe times for them.
ROW_BUCKETS: tuple[tuple[range, tuple[int, ...]], ...] = (
    (range(1, 2), (1,)),
    (range(2, 5), (2, 4)),
    (range(5, MAX_ROWS + 1), (8, 24)),
)
COLD_BYTES = 64 * 2**20  # the probe cycles through this many bytes of weights: more than a CPU cache holds
MAX_COPIES = 256  # ... but through no more weights than this (tiny test models), so that it stays quick
PACK_ROWS_HINT = 8  # the row count oneDNN tunes a packed layout for; it runs any row count


def weight_first(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x @ weight.T for a (rows, in) `x`, computed as (weight @ x.T).T; one row goes in twice (see the module).

    Both ends are made row-major (a copy of a few rows). MKL multiplies by x.T fast when it is a transposed view
    of a row-major x, and about 3x slower when x.T is itself row-major, which is what a previous product's
    transposed result, or anything computed from it (an activation, the residual stream), hands on
    (`benchmarks/verify_cost.py` part (b)). Left alone, one such result slowed every later layer: a SmolLM2 step
    at block size 2 took 66 ms instead of 54 (`blockpilot calibrate`)."""
    if x.shape[0] == 1:
        return (weight @ x.expand(2, -1).contiguous().T)[:, :1].T.contiguous()
    return (weight @ x.contiguous().T).T.contiguous()


def pack(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (out, in) reordered into oneDNN's blocked layout, for `packed_linear`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, PACK_ROWS_HINT)


def packed_linear(packed: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x @ weight.T for a (rows, in) `x`, from `pack(weight)`."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, None, "none", [], "")


@functools.cache
def packing_works() -> bool:
    """Whether this torch build has oneDNN's packed linear (CPU builds with mkldnn do)."""
    try:
        weight, x = torch.randn(4, 3), torch.randn(2, 3)
        return torch.allclose(packed_linear(pack(weight), x), F.linear(x, weight), atol=1e-5)
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def fast_kernels(in_features: int, out_features: int, threads: int, allow_packed: bool = True) -> dict[int, str]:
    """Row count -> "columns" or "packed", for the row counts where that kernel beats F.linear by 10% or more
    (and is the fastest) on this CPU for float32 products of this weight shape; probed once per shape and
    process, per row bucket (median of 4 interleaved samples). It depends on the shape, the rows and the threads:
    on a 2-core CPU "columns" wins 3x for a 49152 x 576 LM head at 2 rows and loses with 1 thread.

    In a forward every weight comes from memory, not from the cache, so the probe cycles through distinct weights
    worth `COLD_BYTES`: timing one small weight over and over (hot in cache) picked the slower kernel for
    SmolLM2's 576-wide layers in about half of the processes. The kernels alternate sample by sample, so a change
    of load during the probe falls on all of them."""
    copies = min(MAX_COPIES, max(1, COLD_BYTES // (4 * in_features * out_features)))
    weights = torch.randn(copies, out_features, in_features)
    kernels: dict[str, tuple[Callable, list[torch.Tensor] | torch.Tensor]] = {
        "linear": (lambda w, x: F.linear(x, w), weights),
        "columns": (weight_first, weights),
    }
    if allow_packed and packing_works():
        kernels["packed"] = (packed_linear, [pack(w) for w in weights])

    def seconds(product, operands, inputs: list[torch.Tensor]) -> float:
        start = time.perf_counter()
        for weight in operands:
            for x in inputs:
                product(weight, x)
        return time.perf_counter() - start

    def fastest(rows: tuple[int, ...]) -> str:
        inputs = [torch.randn(n, in_features) for n in rows]
        times: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(5):  # the first round warms up and is dropped
            for name, (product, operands) in kernels.items():
                times[name].append(seconds(product, operands, inputs))
        median = {name: statistics.median(samples[1:]) for name, samples in times.items()}
        best = min(median, key=median.__getitem__)
        return best if median[best] < 0.9 * median["linear"] else "linear"

    with torch.inference_mode():
        choices = [(bucket, fastest(probed)) for bucket, probed in ROW_BUCKETS]
    return {rows: kernel for bucket, kernel in choices if kernel != "linear" for rows in bucket}


# One packed copy per layer, remade when its weight is replaced or written in place (`_version`).
_PACKED: weakref.WeakKeyDictionary[nn.Linear, tuple[tuple, torch.Tensor]] = weakref.WeakKeyDictionary()


def _packed_weight(layer: nn.Linear) -> torch.Tensor:
    weight = layer.weight
    # Tensors made under `torch.inference_mode` (the drafter's head, sliced there) keep no version counter.
    version = None if weight.is_inference() else weight._version
    key = (weight.data_ptr(), version, tuple(weight.shape))
    cached = _PACKED.get(layer)
    if cached is None or cached[0] != key:
        cached = (key, pack(weight.detach()))
        _PACKED[layer] = cached
    return cached[1]


def _small_row_linear(layer: nn.Linear, kernels: dict[int, str], x: torch.Tensor) -> torch.Tensor:
    rows = x.numel() // x.shape[-1]
    kernel = kernels.get(rows)
    if kernel is None:
        return F.linear(x, layer.weight, layer.bias)
    x2d = x.reshape(rows, x.shape[-1])
    y2d = packed_linear(_packed_weight(layer), x2d) if kernel == "packed" else weight_first(layer.weight, x2d)
    y = y2d.reshape(*x.shape[:-1], layer.out_features)
    return y if layer.bias is None else y + layer.bias


def _packing_fits(layers: list[nn.Linear]) -> bool:
    """Whether packed copies of these layers' weights not yet packed fit in half of the available memory."""
    missing = sum(layer.weight.nbytes for layer in layers if layer not in _PACKED)
    # Once packed, asking the OS again is work on every step (`small_row_forward` runs per drafter pass).
    return not missing or missing <= psutil.virtual_memory().available // 2


def _eligible(module: nn.Module) -> bool:
    """A plain float32 CPU `nn.Linear` whose `forward` no other library overrides on the instance (hooks)."""
    return (
        type(module) is nn.Linear
        and "forward" not in module.__dict__
        and module.weight.dtype == torch.float32
        and module.weight.device.type == "cpu"
    )


def small_row_forward(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """`layer(x)` with the kernel `small_row_linears` would give it, for a layer no model holds (the drafter's
    head sliced to its draft vocabulary); plain `layer(x)` where it would not apply (other dtypes, devices)."""
    if not _eligible(layer) or (torch.is_grad_enabled() and layer.weight.requires_grad):
        return layer(x)
    kernels = fast_kernels(layer.in_features, layer.out_features, torch.get_num_threads(), _packing_fits([layer]))
    return _small_row_linear(layer, kernels, x)


@contextlib.contextmanager
def small_row_linears(*models: nn.Module):
    """Within the block, float32 CPU `nn.Linear` layers of `models` compute 1..MAX_ROWS rows with the kernel
    `fast_kernels` found fastest on this machine for their shape and row count; every layer is restored on exit.
    Layers whose `forward` is already overridden on the instance (hooks of other libraries) are left alone."""
    layers = [m for model in models for m in model.modules() if _eligible(m)]
    threads, allow_packed = torch.get_num_threads(), _packing_fits(layers)
    patched = []
    for layer in layers:
        kernels = fast_kernels(layer.in_features, layer.out_features, threads, allow_packed)
        if kernels:
            layer.forward = functools.partial(_small_row_linear, layer, kernels)
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
