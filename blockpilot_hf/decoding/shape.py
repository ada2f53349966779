"""`DraftShape`: how one request drafts at every step, the unit a BlockPilot policy chooses among.

    DraftShape.parse("8")                 # a chain: the drafter's 7 argmax tokens after the anchor, 8 verified
    DraftShape.parse("8+tree16")          # a tree of up to 16 drafted nodes, at most 7 deep
    DraftShape.parse("1+lookup10")        # prompt lookup alone: up to 10 tokens copied from the text, no drafter
    DraftShape.parse("8+tree16+lookup10")  # the tree, with the copied continuation as one more branch

The text form is what policy configs, collect records and stats store; a plain int is the chain of that size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PART = re.compile(r"(tree|lookup)(\d+)")


@dataclass(frozen=True, order=True)
class DraftShape:
    """Chain length `block_size` (1 = no drafter pass), a draft tree of up to `tree_budget` nodes instead of the
    chain (0 = chain), and prompt lookup of up to `lookup_tokens` copied tokens (0 = off)."""

    block_size: int
    tree_budget: int = 0
    lookup_tokens: int = 0

    def __post_init__(self) -> None:
        for name, low in (("block_size", 1), ("tree_budget", 0), ("lookup_tokens", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"DraftShape.{name} must be an int >= {low}, got {value!r}.")
        if self.tree_budget and self.block_size < 2:
            raise ValueError(f"A draft tree needs a block size >= 2 (its depth + 1), got {self}.")

    @classmethod
    def parse(cls, value: int | str | DraftShape) -> DraftShape:
        """A shape from its text form ("8", "8+tree16", "1+lookup10", "8+tree16+lookup10"), an int, or a shape."""
        if isinstance(value, DraftShape):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        if not isinstance(value, str):
            raise TypeError(f"A draft shape is an int or a string like '8+tree16', got {value!r}.")
        head, *rest = value.strip().split("+")
        options = {}
        for part in rest:
            match = _PART.fullmatch(part.strip())
            if not match or match[1] in options:
                raise ValueError(
                    f"Draft shape {value!r}: expected a block size followed by optional '+treeN' and '+lookupK' "
                    "parts, each at most once (e.g. '8+tree16+lookup10')."
                )
            options[match[1]] = int(match[2])
        if not head.strip().isdigit():
            raise ValueError(f"Draft shape {value!r} must start with the block size, e.g. '8' or '8+tree16'.")
        return cls(int(head), options.get("tree", 0), options.get("lookup", 0))

    def __str__(self) -> str:
        text = str(self.block_size)
        if self.tree_budget:
            text += f"+tree{self.tree_budget}"
        if self.lookup_tokens:
            text += f"+lookup{self.lookup_tokens}"
        return text

    @property
    def is_chain(self) -> bool:
        """A plain chain of `block_size` (no tree, no lookup): what a fixed block size means."""
        return not self.tree_budget and not self.lookup_tokens

    @property
    def max_tokens(self) -> int:
        """The most tokens one step can commit: the longest drafted path, or the copied tokens, plus one."""
        return max(self.block_size, self.lookup_tokens + 1)
