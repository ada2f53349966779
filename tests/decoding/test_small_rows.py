"""The small-row layout for float32 CPU verify passes: same products, scoped to the engine, restored after, and
greedy output still token-identical to plain `generate` with it forced on."""

from __future__ import annotations

import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from blockpilot_hf.decoding import small_rows
from blockpilot_hf.decoding.small_rows import MAX_ROWS, small_row_linears
from blockpilot_hf.testing_utils import plain_greedy, random_prompt, tiny_drafter, tiny_target

ALL_ROWS = frozenset(range(1, MAX_ROWS + 1))


@pytest.fixture()
def layout_pays(monkeypatch):
    """Force the probe's answer, so the tests do not depend on this machine's kernels."""
    answer = {"pays": True}
    monkeypatch.setattr(small_rows, "fast_rows", lambda *shape: ALL_ROWS if answer["pays"] else frozenset())
    return answer


@pytest.mark.parametrize("rows", [1, 2, 5, MAX_ROWS, MAX_ROWS + 1, 40])
def test_products_match_f_linear_and_layers_are_restored(layout_pays, rows):
    torch.manual_seed(rows)
    model = nn.Sequential(nn.Linear(16, 24), nn.Linear(24, 8, bias=False))
    x = torch.randn(1, rows, 16)
    expected = model(x)
    with small_row_linears(model):
        patched = [layer for layer in model if "forward" in layer.__dict__]
        got = model(x)
    assert len(patched) == 2 and not any("forward" in layer.__dict__ for layer in model)
    torch.testing.assert_close(got, expected)
    assert got.shape == expected.shape


def test_only_float32_cpu_layers_without_their_own_forward_are_touched(layout_pays):
    own, double = nn.Linear(4, 4), nn.Linear(4, 4).double()
    own.forward = lambda x: x  # e.g. another library's hook
    model = nn.Sequential(own, double, nn.Linear(4, 4))
    with small_row_linears(model):
        assert model[0].forward(torch.ones(1)) == 1 and "forward" not in double.__dict__
        assert "forward" in model[2].__dict__
    assert "forward" in own.__dict__  # left as it was
    layout_pays["pays"] = False  # a machine where F.linear is as fast: nothing changes
    with small_row_linears(model):
        assert "forward" not in model[2].__dict__


@settings(deadline=None, max_examples=15, derandomize=True)
@given(block_size=st.integers(1, 12), prompt_seed=st.integers(0, 10_000), max_new_tokens=st.integers(1, 24))
def test_float32_greedy_output_is_unchanged_with_the_layout(block_size, prompt_seed, max_new_tokens):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(small_rows, "fast_rows", lambda *shape: ALL_ROWS)
        target = tiny_target(seed=1, dtype=torch.float32)
        drafter = tiny_drafter(target, block_size=8)
        prompt = random_prompt(prompt_seed, 7)
        expected = plain_greedy(target, prompt, max_new_tokens)
        out = target.generate(
            input_ids=prompt, assistant_model=drafter, block_size=block_size, max_new_tokens=max_new_tokens
        )
        assert torch.equal(out, expected)
        assert not any("forward" in m.__dict__ for m in target.modules())  # restored after generate


def test_each_row_count_takes_the_layout_its_bucket_was_probed_for(monkeypatch):
    """A shape whose probe found the layout faster only for one row computes 1 row as `weight_first` (the row
    twice, one kept) and 2+ rows with F.linear."""
    monkeypatch.setattr(small_rows, "fast_rows", lambda *shape: frozenset({1}))
    calls = []
    real = small_rows.weight_first
    monkeypatch.setattr(small_rows, "weight_first", lambda w, x: calls.append(x.shape[0]) or real(w, x))
    layer = nn.Linear(16, 24)
    with small_row_linears(layer):
        for rows in (1, 2, 1, 5):
            assert layer(torch.randn(rows, 16)).shape == (rows, 24)
    assert calls == [1, 1]


def test_the_probe_decides_each_bucket_from_its_own_timings(monkeypatch):
    """With a layout far slower than F.linear for one row and far faster for more, the probe answers exactly the
    2..MAX_ROWS bucket."""

    def layout(weight, x):
        if x.shape[0] == 1:
            time.sleep(1e-4)

    monkeypatch.setattr(small_rows, "weight_first", layout)
    assert small_rows.fast_rows.__wrapped__(8, 9, torch.get_num_threads()) == frozenset(range(2, MAX_ROWS + 1))
