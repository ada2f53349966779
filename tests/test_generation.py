"""`enable(model)`: the same object, unchanged behaviour without a DFlash assistant, and the in-tree
`speculation_type="dflash"` path with our drafter giving plain greedy output."""

from __future__ import annotations

import pytest
import torch

import blockpilot_hf
from blockpilot_hf import BlockPilotGenerateOutput
from blockpilot_hf.testing_utils import plain_greedy, random_prompt, tiny_drafter, tiny_target


def twins():
    """The same random target twice: one enabled, one left as plain transformers."""
    return tiny_target(seed=0), tiny_target(seed=0, enabled=False)


def test_enable_returns_the_same_object_once():
    model = tiny_target(seed=0, enabled=False)
    original = model.generate
    assert blockpilot_hf.enable(model) is model
    wrapped = model.generate
    assert wrapped is not original
    assert blockpilot_hf.enable(model).generate is wrapped  # idempotent: never wrapped twice


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(do_sample=False, max_new_tokens=15),
        dict(do_sample=True, max_new_tokens=15, temperature=0.8, top_k=20),
        dict(do_sample=False, max_new_tokens=10, num_beams=3),
        dict(
            do_sample=False,
            max_new_tokens=10,
            repetition_penalty=1.3,
            return_dict_in_generate=True,
            output_scores=True,
        ),
    ],
)
def test_without_a_dflash_assistant_generate_is_unchanged(kwargs):
    enabled, plain = twins()
    prompt = random_prompt(50, 6)
    torch.manual_seed(0)
    ours = enabled.generate(input_ids=prompt, **kwargs)
    torch.manual_seed(0)
    theirs = plain.generate(input_ids=prompt, **kwargs)
    if kwargs.get("return_dict_in_generate"):
        assert type(ours) is type(theirs) and not isinstance(ours, BlockPilotGenerateOutput)
        assert torch.equal(ours.sequences, theirs.sequences)
        assert all(torch.equal(a, b) for a, b in zip(ours.scores, theirs.scores, strict=True))
    else:
        assert torch.equal(ours, theirs)


def test_an_ordinary_assistant_model_still_runs_transformers_assisted_decoding():
    enabled, plain = twins()
    assistant = tiny_target(seed=5, layers=1, enabled=False)
    prompt = random_prompt(51, 6)
    ours = enabled.generate(input_ids=prompt, max_new_tokens=12, do_sample=False, assistant_model=assistant)
    theirs = plain.generate(input_ids=prompt, max_new_tokens=12, do_sample=False, assistant_model=assistant)
    assert torch.equal(ours, theirs) and torch.equal(ours, plain_greedy(plain, prompt, 12))


@pytest.mark.parametrize(  # a block size other than the drafter's own is an enable() argument
    ("enabled", "block_size"), [(False, None), (True, None), (True, 2), (True, 5), (True, 12)]
)
def test_in_tree_dflash_path_with_our_drafter_is_plain_greedy(enabled, block_size):
    target = tiny_target(seed=0, enabled=enabled)
    drafter = tiny_drafter(target, block_size=6)
    prompt = random_prompt(52, 7)
    kwargs = dict(
        input_ids=prompt,
        max_new_tokens=18,
        do_sample=False,
        assistant_model=drafter,
        speculation_type="dflash",
    )
    if block_size is not None:
        kwargs["block_size"] = block_size
    out = target.generate(**kwargs)
    assert torch.equal(out, plain_greedy(target, prompt, 18))
    assert drafter.config.block_size == 6  # a per-call block size never leaks into the drafter's config


def test_in_tree_path_uses_the_requested_block_size():
    """Spy on the drafter: transformers' loop must draft blocks of the size we asked for."""
    target = tiny_target(seed=0)
    drafter = tiny_drafter(target, block_size=6)
    seen: list[int] = []

    def record_block_length(_module, args, kwargs, _output):
        seen.append((kwargs["noise_embeds"] if "noise_embeds" in kwargs else args[0]).shape[1])

    drafter.register_forward_hook(record_block_length, with_kwargs=True)
    target.generate(
        input_ids=random_prompt(53, 5),
        max_new_tokens=10,
        do_sample=False,
        assistant_model=drafter,
        speculation_type="dflash",
        block_size=3,
    )
    assert seen and set(seen) == {3}


def test_block_policy_is_refused_on_the_in_tree_path():
    target = tiny_target(seed=0)
    with pytest.raises(ValueError, match=r"`block_policy` runs on blockpilot's engine only"):
        target.generate(
            input_ids=random_prompt(54, 5),
            max_new_tokens=4,
            assistant_model=tiny_drafter(target),
            speculation_type="dflash",
            block_policy="fixed:4",
        )


def test_dflash_assistant_output_types():
    target = tiny_target(seed=0)
    drafter = tiny_drafter(target)
    prompt = random_prompt(55, 5)
    tensor = target.generate(input_ids=prompt, max_new_tokens=6, do_sample=False, assistant_model=drafter)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (1, 11)
    out = target.generate(
        input_ids=prompt,
        max_new_tokens=6,
        do_sample=False,
        assistant_model=drafter,
        return_dict_in_generate=True,
    )
    assert isinstance(out, BlockPilotGenerateOutput) and torch.equal(out.sequences, tensor)
    assert out.blockpilot.block_size == 8 and out.blockpilot.new_tokens == 6
