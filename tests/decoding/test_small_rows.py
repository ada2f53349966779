"""The small-row kernels for float32 CPU verify passes: same products, scoped to the engine, restored after, and
greedy output still token-identical to plain `generate` with them forced on."""

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

pytestmark = pytest.mark.skipif(not small_rows.packing_works(), reason="this torch build has no oneDNN linear")


def mixed_kernels(*shape) -> dict[int, str]:
    """Both kernels, alternating by row count, so one forward exercises each."""
    return {rows: "packed" if rows % 2 else "columns" for rows in range(1, MAX_ROWS + 1)}


@pytest.fixture()
def kernels(monkeypatch):
    """Force the probe's answer (`answer["kernels"]`), so the tests do not depend on this machine's kernels."""
    answer = {"kernels": mixed_kernels()}
    monkeypatch.setattr(small_rows, "fast_kernels", lambda *shape: answer["kernels"])
    return answer


@pytest.mark.parametrize("rows", [1, 2, 5, 8, MAX_ROWS, MAX_ROWS + 1, 40])
@pytest.mark.parametrize("kernel", ["columns", "packed"])
def test_products_match_f_linear_and_layers_are_restored(kernels, kernel, rows):
    kernels["kernels"] = dict.fromkeys(range(1, MAX_ROWS + 1), kernel)
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


@pytest.mark.parametrize("rows", [1, 2, 3, 8])
def test_weight_first_takes_and_gives_row_major_rows(rows):
    """A column-major input (what a transposed product hands on) gives the same product, laid out row-major, so
    the next layer's product gets the fast layout too."""
    torch.manual_seed(rows)
    weight = torch.randn(24, 16)
    x = torch.randn(16, rows).T  # (rows, 16), column-major
    got = small_rows.weight_first(weight, x)
    assert got.is_contiguous()
    torch.testing.assert_close(got, x @ weight.T)


def test_a_packed_copy_follows_its_weight(kernels):
    """Writing the weight in place (load_state_dict) or replacing it repacks: never a stale product."""
    kernels["kernels"] = dict.fromkeys(range(1, MAX_ROWS + 1), "packed")
    layer, x = nn.Linear(8, 4), torch.randn(3, 8)
    with small_row_linears(layer):
        layer(x)
        with torch.no_grad():
            layer.weight.mul_(2)
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
        layer.weight = nn.Parameter(torch.randn(4, 8))
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))


def test_only_float32_cpu_layers_without_their_own_forward_are_touched(kernels):
    own, double = nn.Linear(4, 4), nn.Linear(4, 4).double()
    own.forward = lambda x: x  # e.g. another library's hook
    model = nn.Sequential(own, double, nn.Linear(4, 4))
    with small_row_linears(model):
        assert model[0].forward(torch.ones(1)) == 1 and "forward" not in double.__dict__
        assert "forward" in model[2].__dict__
    assert "forward" in own.__dict__  # left as it was
    kernels["kernels"] = {}  # a machine where F.linear is the fastest: nothing changes
    with small_row_linears(model):
        assert "forward" not in model[2].__dict__


@settings(deadline=None, max_examples=15, derandomize=True)
@given(block_size=st.integers(1, 12), prompt_seed=st.integers(0, 10_000), max_new_tokens=st.integers(1, 24))
def test_float32_greedy_output_is_unchanged_with_the_kernels(block_size, prompt_seed, max_new_tokens):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(small_rows, "fast_kernels", mixed_kernels)
        target = tiny_target(seed=1, dtype=torch.float32)
        drafter = tiny_drafter(target, block_size=8)
        prompt = random_prompt(prompt_seed, 7)
        expected = plain_greedy(target, prompt, max_new_tokens)
        out = target.generate(
            input_ids=prompt, assistant_model=drafter, block_size=block_size, max_new_tokens=max_new_tokens
        )
        assert torch.equal(out, expected)
        assert not any("forward" in m.__dict__ for m in target.modules())  # restored after generate


def test_each_row_count_takes_the_kernel_its_bucket_was_probed_for(monkeypatch):
    """1 row as `weight_first`, 5 rows packed, and rows the probe left to F.linear (2) with F.linear."""
    monkeypatch.setattr(small_rows, "fast_kernels", lambda *shape: {1: "columns", 5: "packed"})
    calls = []
    columns, packed = small_rows.weight_first, small_rows.packed_linear
    monkeypatch.setattr(small_rows, "weight_first", lambda w, x: calls.append(("columns", len(x))) or columns(w, x))
    monkeypatch.setattr(small_rows, "packed_linear", lambda w, x: calls.append(("packed", len(x))) or packed(w, x))
    layer = nn.Linear(16, 24)
    with small_row_linears(layer):
        for rows in (1, 2, 5, 1):
            assert layer(torch.randn(rows, 16)).shape == (rows, 24)
    assert calls == [("columns", 1), ("packed", 5), ("columns", 1)]


def test_the_probe_decides_each_bucket_from_its_own_timings(monkeypatch):
    """With "columns" far faster than F.linear only for 2-4 rows, and "packed" only from 5 rows on, the probe
    answers exactly those buckets."""

    def columns(weight, x):
        if not 2 <= x.shape[0] <= 4:
            time.sleep(5e-4)

    def packed(weight, x):
        if x.shape[0] < 5:
            time.sleep(5e-4)

    monkeypatch.setattr(small_rows, "weight_first", columns)
    monkeypatch.setattr(small_rows, "packed_linear", packed)
    answer = small_rows.fast_kernels.__wrapped__(8, 9, torch.get_num_threads())
    assert answer == {**dict.fromkeys(range(2, 5), "columns"), **dict.fromkeys(range(5, MAX_ROWS + 1), "packed")}
    assert "packed" not in small_rows.fast_kernels.__wrapped__(8, 9, torch.get_num_threads(), False).values()


def test_packed_copies_are_only_made_while_they_fit_in_memory(monkeypatch):
    """Short of memory, the probe is asked for kernels without packing."""
    asked = []
    monkeypatch.setattr(small_rows, "fast_kernels", lambda *shape: asked.append(shape[-1]) or {})
    monkeypatch.setattr(small_rows.psutil, "virtual_memory", lambda: type("Memory", (), {"available": 100})())
    with small_row_linears(nn.Linear(16, 24)):
        pass
    assert asked == [False]


def test_a_layer_no_model_holds_takes_the_kernels_too(kernels, monkeypatch):
    """`small_row_forward` (the drafter's sliced head) runs the probed kernel, the same product as the layer."""
    kernels["kernels"] = dict.fromkeys(range(1, MAX_ROWS + 1), "packed")
    calls = []
    packed = small_rows.packed_linear
    monkeypatch.setattr(small_rows, "packed_linear", lambda w, x: calls.append(len(x)) or packed(w, x))
    layer, x = nn.Linear(16, 24, bias=False).requires_grad_(False), torch.randn(1, 7, 16)
    torch.testing.assert_close(small_rows.small_row_forward(layer, x), layer(x))
    assert calls == [7]
    small_rows.small_row_forward(layer.double(), x.double())  # not float32: plain F.linear
    assert calls == [7]


def test_generate_under_inference_mode_with_a_draft_vocabulary(kernels):
    """The drafter's head is sliced inside `generate`: under `torch.inference_mode` it is an inference tensor,
    which has no version counter for the packed copy's key."""
    kernels["kernels"] = dict.fromkeys(range(1, MAX_ROWS + 1), "packed")
    target = tiny_target(seed=2, dtype=torch.float32)
    drafter = tiny_drafter(target, block_size=8)
    drafter.set_draft_vocab(list(range(0, 96, 2)))
    prompt = random_prompt(3, 9)
    expected = plain_greedy(target, prompt, 20)
    with torch.inference_mode():
        out = target.generate(input_ids=prompt, assistant_model=drafter, block_size=6, max_new_tokens=20)
    assert torch.equal(out, expected)
