"""`OracleDrafter`: a drafter that knows the target's continuation, for tests and overhead benchmarks.

It runs the real drafter network (so its cost and cache handling are those of the real thing) and then
replaces the logits with one-hot rows for the known tokens, optionally wrong at chosen positions.
"""

from __future__ import annotations

import torch

from ..drafter import DFlashDrafter


class OracleDrafter(DFlashDrafter):
    """Drafts `reference[pos]` for every block position `pos`; positions in `mistakes` get a wrong token."""

    reference: list[int]
    mistakes: set[int]

    @classmethod
    def from_drafter(cls, drafter: DFlashDrafter, reference: torch.Tensor, mistakes=()) -> OracleDrafter:
        """`reference` (1, N): the full sequence (prompt + continuation) the target will produce."""
        oracle = cls(drafter.config).to(drafter.dtype)
        oracle.load_state_dict(drafter.state_dict())
        oracle.reference = reference[0].tolist()
        oracle.mistakes = set(mistakes)
        return oracle.eval()

    @torch.no_grad()
    def draft(self, embed, lm_head, anchor, context_hidden_states, block_size, cache):
        anchor_pos = cache.get_seq_length() + context_hidden_states.shape[1]  # every earlier position is context
        logits = super().draft(embed, lm_head, anchor, context_hidden_states, block_size, cache)
        vocab = logits.shape[-1]
        forced = torch.full_like(logits, -1e4)
        for i in range(block_size - 1):
            pos = anchor_pos + 1 + i
            token = self.reference[pos] if pos < len(self.reference) else 0
            forced[0, i, (token + 1) % vocab if pos in self.mistakes else token] = 1e4
        return forced
