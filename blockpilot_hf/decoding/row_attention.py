"""Verify passes that give every row the bits of a one-token step, for bfloat16 and float16 targets on a CPU.

A pass over k tokens and k one-token steps compute the same function but not the same roundings. In bfloat16
those roundings flip greedy near-ties, so a speculative decode parts from plain `generate` (3 of 9 greedy outputs
per draft shape stayed identical on SmolLM2-135M, `benchmarks/row_attention.py`). On a CPU the linear layers are
not the cause: oneDNN's bfloat16 products give each row the same bits whatever the row count. Attention is:
SDPA's CPU kernel treats a block of queries together. So while the engine verifies, the target's attention
computes each query row alone, exactly as a one-token step computes it: the model's own attention function, on
that row's visible keys (the cache up to it, or the cache and its tree ancestors, in order), without a mask. With
that, SmolLM2's bfloat16 logits over a verified block equal those of one-token steps bit for bit (on an Intel
Xeon with AMX here), and its greedy outputs plain bfloat16 `generate`'s. The price is one attention call per row
and layer instead of one per layer, and for a tree node a copy of the keys it sees (`benchmarks/verify_cost.py`
part (e) times chains).

Float32 keeps the batched kernel: its roundings almost never flip a greedy choice, and its linear layers take
other kernels for small rows anyway (`small_rows.py`). Where products of different row counts round differently
(float16 on this CPU, GPUs), row-by-row attention would buy no exactness, so a one-time probe per weight shape
(`rows_independent`) keeps it off there.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

ROW_ATTENTION = "blockpilot_rows_sdpa"  # transformers' "sdpa", one query row at a time


def _visible_keys(allowed: torch.Tensor) -> slice | torch.Tensor:
    """The keys one query row may attend to, from its (L,) bool mask: a slice when they are a prefix (a chain's
    row: the cache and the block up to itself), else their indices (a tree node: the cache and its ancestors)."""
    keys = allowed.nonzero().squeeze(1)
    if bool(allowed[: keys.numel()].all()):
        return slice(0, keys.numel())
    return keys


_last: list = [None, []]  # the last mask seen and its rows' visible keys: every layer of a pass gets the same mask


def _rows_keys(attention_mask: torch.Tensor) -> list[slice | torch.Tensor]:
    """`_visible_keys` of every row of a (1, 1, q, L) mask, bool or additive (a tree's), worked out once per pass."""
    if _last[0] is not attention_mask:
        mask = attention_mask[0, 0]
        allowed = mask if mask.dtype == torch.bool else mask == 0
        _last[:] = [attention_mask, [_visible_keys(row) for row in allowed]]
    return _last[1]


def rows_alone(attention: Callable) -> Callable:
    """`attention` (a transformers attention function) computing a pass of several queries after a cache one
    query at a time, each as a one-token step would; other calls (the prefill, batches) go to it unchanged."""

    @functools.wraps(attention)
    def row_by_row(module, query, key, value, attention_mask, **kwargs):
        # query (1, H, q, D); key / value (1, H_kv, L, D); attention_mask (1, 1, q, L), bool (a tree's: additive)
        batch, _, rows, _ = query.shape
        if batch != 1 or attention_mask is None or not 1 < rows < key.shape[2]:
            return attention(module, query, key, value, attention_mask, **kwargs)
        outputs = []
        for row, keys in enumerate(_rows_keys(attention_mask)):
            out, _ = attention(module, query[:, :, row : row + 1], key[:, :, keys], value[:, :, keys], None, **kwargs)
            outputs.append(out)  # (1, 1, H, D)
        return torch.cat(outputs, dim=1), None

    return row_by_row


AttentionInterface.register(ROW_ATTENTION, rows_alone(ALL_ATTENTION_FUNCTIONS["sdpa"]))
AttentionMaskInterface.register(ROW_ATTENTION, sdpa_mask)


@functools.cache
def rows_independent(in_features: int, out_features: int, dtype: torch.dtype, threads: int) -> bool:
    """Whether this CPU's `F.linear` gives each row of a product of this shape and dtype the same bits at any
    row count (probed once per process on random operands). oneDNN's bfloat16 products do here; float16 ones do
    not, and where they do not, no attention makes a verify pass exact."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=g).to(dtype)
    for rows in (2, 5, 8, 17, 32):
        x = torch.randn(rows, in_features, generator=g).to(dtype)
        one_by_one = torch.cat([F.linear(x[i : i + 1], weight) for i in range(rows)])
        if not torch.equal(F.linear(x, weight), one_by_one):
            return False
    return True


def wants_row_attention(model) -> bool:
    """Whether `model`'s verify passes should compute attention row by row: a half-precision model on a CPU
    with transformers' "sdpa" attention (the default; "eager" is defined per model and keeps batched rows),
    whose every linear shape is `rows_independent`, so that the pass becomes exact."""
    if not (
        model.dtype in (torch.bfloat16, torch.float16)
        and model.device.type == "cpu"
        and model.config._attn_implementation == "sdpa"
    ):
        return False
    shapes = {(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)}
    return all(rows_independent(*shape, model.dtype, torch.get_num_threads()) for shape in shapes)


@contextlib.contextmanager
def row_attention(model):
    """Within the block, `model` computes attention row by row where `wants_row_attention` says so; its
    attention implementation is restored on exit."""
    if not wants_row_attention(model):
        yield
        return
    before = model.config._attn_implementation
    model.config._attn_implementation = ROW_ATTENTION  # the setter reaches every sub-config
    try:
        yield
    finally:
        model.config._attn_implementation = before
        _last[:] = [None, []]


def with_row_attention(engine):
    """Decorator for an engine `(target, ...)`: run it inside `row_attention(target)`."""

    @functools.wraps(engine)
    def run(target, *args, **kwargs):
        with row_attention(target):
            return engine(target, *args, **kwargs)

    return run
