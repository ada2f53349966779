"""The CPU kernels' one switch: on by default in the engine, off with `enable(..., cpu_kernels=False)`, usable
around plain `generate`, restoring everything on exit; and without oneDNN's private packed linear (its fallback),
output is still exact."""

from __future__ import annotations

import pytest
import torch

import blockpilot_hf
from blockpilot_hf.decoding import kernels, small_rows
from blockpilot_hf.testing_utils import plain_greedy, random_prompt, tiny_drafter, tiny_target


def columns_only(*shape) -> dict[int, str]:
    """The probe's answer on a machine without oneDNN packing: the column layout for every small row count."""
    return dict.fromkeys(range(1, small_rows.MAX_ROWS + 1), "columns")


def test_plain_generate_inside_the_switch_is_unchanged_and_everything_is_restored(monkeypatch):
    monkeypatch.setattr(small_rows, "fast_kernels", columns_only)
    target = tiny_target(seed=2, dtype=torch.float32)
    prompt = random_prompt(3, 9)
    expected = plain_greedy(target, prompt, 16)
    attention = target.config._attn_implementation
    with blockpilot_hf.cpu_kernels(target):
        assert any("forward" in m.__dict__ for m in target.modules() if isinstance(m, torch.nn.Linear))
        assert torch.equal(plain_greedy(target, prompt, 16), expected)
    assert not any("forward" in m.__dict__ for m in target.modules())
    assert target.config._attn_implementation == attention


def test_the_engine_switches_kernels_on_by_default_and_off_on_request(monkeypatch):
    entered = []
    real = kernels.cpu_kernels

    def spy(*models, **kwargs):
        entered.append(len(models))
        return real(*models, **kwargs)

    monkeypatch.setattr(kernels, "cpu_kernels", spy)
    target = tiny_target(seed=2, dtype=torch.float32)
    drafter = tiny_drafter(target)
    prompt = random_prompt(4, 7)
    on = target.generate(input_ids=prompt, assistant_model=drafter, block_size=4, max_new_tokens=8)
    assert entered == [2]  # target and drafter
    blockpilot_hf.enable(target, cpu_kernels=False)
    off = target.generate(input_ids=prompt, assistant_model=drafter, block_size=4, max_new_tokens=8)
    assert entered == [2] and torch.equal(on, off)
    blockpilot_hf.enable(target)
    target.generate(input_ids=prompt, assistant_model=drafter, block_size=4, max_new_tokens=8)
    assert entered == [2, 2]


@pytest.mark.parametrize("block_size", [1, 3, 8])
def test_without_the_private_packed_linear_the_fallback_is_exact(monkeypatch, block_size):
    """`packing_works()` false (a torch build without oneDNN): only public products are used, and greedy output
    stays plain greedy's."""
    monkeypatch.setattr(small_rows, "packing_works", lambda: False)
    monkeypatch.setattr(small_rows, "fast_kernels", small_rows.fast_kernels.__wrapped__)  # probe afresh, no cache
    target = tiny_target(seed=5, dtype=torch.float32)
    drafter = tiny_drafter(target)
    prompt = random_prompt(6, 8)
    out = target.generate(input_ids=prompt, assistant_model=drafter, block_size=block_size, max_new_tokens=20)
    assert torch.equal(out, plain_greedy(target, prompt, 20))
