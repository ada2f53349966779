"""A drafter restricted to a frequency-ranked vocabulary drafts only from it, and output stays lossless."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from blockpilot_hf.testing_utils import plain_greedy, random_prompt, tiny_drafter, tiny_target


def test_draft_vocabulary_restricts_drafts_and_keeps_greedy_identical():
    target = tiny_target()
    allowed = list(range(0, 96, 3))
    drafter = tiny_drafter(target, draft_vocab_ids=allowed)
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    features = torch.randn(1, 5, drafter.config.hidden_size * 2, dtype=target.dtype)
    logits = drafter.draft(embed, head, torch.tensor([[7]]), features, 6, DynamicCache(config=drafter.config))
    assert set(logits.argmax(-1)[0].tolist()) <= set(allowed)
    assert torch.isinf(logits[0, :, 1]).all()  # id 1 is outside the vocabulary
    full = tiny_drafter(target)
    full_logits = full.draft(embed, head, torch.tensor([[7]]), features, 6, DynamicCache(config=full.config))
    torch.testing.assert_close(logits[0][:, allowed], full_logits[0][:, allowed])  # same weights (same seed)
    prompt = random_prompt(4, 9)
    out = target.generate(input_ids=prompt, max_new_tokens=24, do_sample=False, assistant_model=drafter, block_size=4)
    assert torch.equal(out, plain_greedy(target, prompt, 24))
