"""CPU kernels for small passes, as one switch: on by default in our engine, off with `cpu_kernels=False`, and
usable around plain `generate` too.

    with blockpilot_hf.cpu_kernels(target):            # plain decoding with the same kernels
        target.generate(input_ids, max_new_tokens=128)
    blockpilot_hf.enable(target, cpu_kernels=False)   # our engine without them (a comparison of the two)

Two things switch on, each only where it helps or is needed on the machine at hand (a one-time probe decides):
- float32 `nn.Linear` layers computing 1-32 rows take the fastest of three layouts for their shape (MKL's
  one-row product is slow; `small_rows.py`): our verify passes, and plain decoding's one-token steps;
- a half-precision target computes attention one query row at a time, exactly as a one-token step does
  (`row_attention.py`), so a verify pass over k tokens gives the bits of k one-token steps: greedy output stays
  identical to plain `generate` in bfloat16 too.
Outside the block every layer and the attention implementation are as they were.
"""

from __future__ import annotations

import contextlib
import functools

from torch import nn

from .row_attention import row_attention
from .small_rows import small_row_linears


@contextlib.contextmanager
def cpu_kernels(target: nn.Module, *others: nn.Module, attention: bool = True):
    """Within the block, the small-row linear kernels for `target` and `others` (a drafter), and, with
    `attention`, row-by-row attention for a half-precision `target`."""
    with small_row_linears(target, *others), row_attention(target) if attention else contextlib.nullcontext():
        yield


def with_cpu_kernels(attention: bool = True):
    """Decorator for an engine `(target, drafter, ...)`: run it inside `cpu_kernels(target, drafter)` unless it is
    called with `cpu_kernels=False`."""

    def wrap(engine):
        @functools.wraps(engine)
        def run(target, drafter, *args, **kwargs):
            if not kwargs.pop("cpu_kernels", True):
                return engine(target, drafter, *args, **kwargs)
            with cpu_kernels(target, drafter, attention=attention):
                return engine(target, drafter, *args, **kwargs)

        return run

    return wrap
