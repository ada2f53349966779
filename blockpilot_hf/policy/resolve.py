"""Turn the `block_size` / `block_policy` arguments of `generate` into a block size or a per-request chooser."""

from __future__ import annotations

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
    raise ValueError(f"Unknown block_policy {block_policy!r}: pass an int, 'fixed:N', a policy folder or Hub id, or a BlockPolicy.")
