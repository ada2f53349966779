"""Turn the `block_size` / `block_policy` arguments of `generate` into a block size or a per-request chooser.

`block_policy` may be an int, `"fixed:N"`, a policy folder, a Hub id of one, a `BlockPolicy`, or any callable
taking a `Prefill` and returning an int. Whatever a chooser returns is checked by `check_block_size` before the
engine uses it, so a policy can change speed but never correctness.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..decoding.engine import Prefill
from ..validation import check_block_size


def resolve_block_policy(block_policy, block_size, drafter, target):
    """Return (int or chooser(Prefill) -> int, name) for the engine.

    Accepts an int or `"fixed:N"` for a fixed size; none of both means the drafter's training block size.
    """
    if block_policy is not None and block_size is not None:
        raise ValueError("Pass either `block_size` or `block_policy`, not both.")
    if block_policy is None:
        size = drafter.config.block_size if block_size is None else block_size
        return check_block_size(size, drafter), f"fixed:{size}"
    if isinstance(block_policy, int) and not isinstance(block_policy, bool):
        return check_block_size(block_policy, drafter), f"fixed:{block_policy}"
    if isinstance(block_policy, str) and block_policy.startswith("fixed:"):
        try:
            size = int(block_policy.removeprefix("fixed:"))
        except ValueError as err:
            raise ValueError(f"block_policy {block_policy!r}: expected 'fixed:N' with an integer N.") from err
        return check_block_size(size, drafter), block_policy
    from .head import BlockPolicy

    if isinstance(block_policy, (str, os.PathLike)):
        block_policy = BlockPolicy.from_pretrained(block_policy)
    if isinstance(block_policy, BlockPolicy):
        return _prepare_policy(block_policy, drafter, target), f"blockpilot:{block_policy.config.name}"
    if callable(block_policy):
        return _validated(block_policy, drafter), getattr(block_policy, "name", None) or getattr(
            block_policy, "__name__", "callable"
        )
    raise ValueError(
        f"Unknown block_policy {block_policy!r} ({type(block_policy).__name__}): pass an int, 'fixed:N', a policy "
        "folder or Hub id, a BlockPolicy, or a callable taking a Prefill and returning an int."
    )


def _prepare_policy(policy, drafter, target) -> Callable[[Prefill], int]:
    """Check the policy fits this target/drafter, use this machine's calibration if cached, validate its output."""
    from .cost import load_calibration

    policy.check_compatible(target, drafter)
    for size in policy.config.candidate_sizes:
        try:
            check_block_size(size, drafter)
        except ValueError as err:
            raise ValueError(
                f"Policy {policy.config.name!r} can choose block size {size}, which this drafter refuses: {err}"
            ) from err
    calibrated = load_calibration(target, drafter)
    if calibrated is not None:
        policy.use_cost_model(calibrated)
    policy.to(target.device)
    return _validated(policy, drafter)


def _validated(chooser: Callable[[Prefill], int], drafter) -> Callable[[Prefill], int]:
    """Wrap a chooser so that a bad answer raises a clear error instead of reaching the engine."""

    def choose(prefill: Prefill) -> int:
        size = chooser(prefill)
        try:
            return check_block_size(size, drafter)
        except (TypeError, ValueError) as err:
            raise type(err)(
                f"block_policy {getattr(chooser, 'name', chooser)!r} returned an invalid block size: {err}"
            ) from err

    return choose
