"""Tiny random targets and drafters, built in memory so every test runs in seconds on a CPU."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from blockpilot_hf import DFlashConfig, DFlashDrafter, enable

VOCAB = 96
HIDDEN = 32
MASK_ID = VOCAB - 1


def tiny_target(seed: int = 0, arch: str = "qwen3", dtype=torch.float64, vocab: int = VOCAB, layers: int = 4, scale: float = 4.0):
    """A random causal LM; `scale` sharpens its next-token distributions so greedy text is not all ties."""
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
    return enable(model.to(dtype).eval())


def tiny_drafter(target, seed: int = 1, block_size: int = 8, layers: int = 1, **overrides) -> DFlashDrafter:
    torch.manual_seed(seed)
    depth = target.config.num_hidden_layers
    config = DFlashConfig(
        hidden_size=target.config.hidden_size, intermediate_size=48, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, vocab_size=target.config.vocab_size, block_size=block_size,
        mask_token_id=MASK_ID, num_target_layers=depth, target_layer_ids=[0, depth - 1], **overrides,
    )
    return DFlashDrafter(config).to(target.dtype).eval()


def random_prompt(seed: int, length: int, vocab: int = VOCAB) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab - 1, (1, length), generator=g)


def plain_greedy(target, input_ids, max_new_tokens: int, **kwargs) -> torch.Tensor:
    return target.generate(input_ids=input_ids, max_new_tokens=max_new_tokens, do_sample=False, **kwargs)
