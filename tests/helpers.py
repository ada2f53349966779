"""Tiny random targets and drafters, built in memory so every test runs in seconds on a CPU."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from blockpilot_hf import DFlashConfig, DFlashDrafter, enable

VOCAB = 96
HIDDEN = 32
MASK_ID = VOCAB - 1


def tiny_target(
    seed: int = 0, arch: str = "qwen3", dtype=torch.float64, vocab: int = VOCAB, layers: int = 4, scale: float = 4.0,
    enabled: bool = True,
):
    """A random causal LM; `scale` sharpens its next-token distributions so greedy text is not all ties.
    `enabled=False` leaves `generate` untouched (plain transformers), for comparisons and the no-enable paths."""
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, eos_token_id=None, pad_token_id=0, bos_token_id=None,
    )
    if arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=8, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model = model.to(dtype).eval()
    return enable(model) if enabled else model


def tiny_drafter(target, seed: int = 1, block_size: int = 8, layers: int = 1, **overrides) -> DFlashDrafter:
    """A random drafter for `target`; `overrides` replace any config field (to build mismatched drafters)."""
    torch.manual_seed(seed)
    depth = target.config.num_hidden_layers
    fields = dict(
        hidden_size=target.config.hidden_size, intermediate_size=48, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, vocab_size=target.config.vocab_size, block_size=block_size,
        mask_token_id=MASK_ID, num_target_layers=depth, target_layer_ids=[0, depth - 1],
    )
    config = DFlashConfig(**{**fields, **overrides})
    return DFlashDrafter(config).to(target.dtype).eval()


def random_prompt(seed: int, length: int, vocab: int = VOCAB) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab - 1, (1, length), generator=g)


def plain_greedy(target, input_ids, max_new_tokens: int, **kwargs) -> torch.Tensor:
    return target.generate(input_ids=input_ids, max_new_tokens=max_new_tokens, do_sample=False, **kwargs)


def token_text(token_id: int) -> str:
    """The tiny tokenizer's string for a token: one printable character ("!" ... "~", then Latin-1 signs)."""
    return chr(33 + token_id) if token_id < 94 else chr(161 + token_id - 94)


def tiny_tokenizer(vocab: int = VOCAB):
    """A character-level `PreTrainedTokenizerFast` over the tiny vocabulary (for stop strings and text streamers).
    Single characters with no separators let transformers' `StopStringCriteria` read every token's exact text."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = {token_text(i): i for i in range(vocab)}
    backend = Tokenizer(models.WordLevel(vocab=chars, unk_token=token_text(0)))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=token_text(0), unk_token=token_text(0))
