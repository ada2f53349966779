"""Tiny models and records for the benchmark and demo tests (random models, char tokenizer)."""

from __future__ import annotations

from blockpilot_hf.bench.harness import BenchModels
from blockpilot_hf.bench.runs import RunRecord
from blockpilot_hf.data import Prompt
from blockpilot_hf.policy import BlockPolicy, BlockPolicyConfig
from blockpilot_hf.policy.config import FeatureSpec
from blockpilot_hf.testing_utils import HIDDEN, tiny_drafter, tiny_target, tiny_tokenizer


def tiny_models(with_policy: bool = True) -> BenchModels:
    """An enabled tiny target (float64), a random drafter (training block size 8), a random policy."""
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=8)
    tokenizer = tiny_tokenizer()
    policy = None
    if with_policy:
        ids = list(drafter.config.target_layer_ids)
        config = BlockPolicyConfig(
            features=FeatureSpec(HIDDEN, len(ids)),
            vocab_size=target.config.vocab_size,
            target_layer_ids=ids,
            candidate_sizes=[1, 2, 4, 8],
            training_block_size=8,
        )
        policy = BlockPolicy(config).eval()
    return BenchModels(target, tokenizer, drafter, policy)


def tiny_prompts() -> list[Prompt]:
    """Two one-turn prompts of two datasets and one two-turn prompt (MT-Bench style)."""
    return [
        Prompt("gsm8k", "gsm8k/1", ("Howmanyapples?",)),
        Prompt("humaneval", "HumanEval/1", ("defadd(a,b):",)),
        Prompt("mt-bench", "mt-bench/1", ("Writeapoem.", "Nowshorter.")),
    ]


def rec(
    arm: str,
    prompt: str,
    seconds: float,
    *,
    tokens: int = 10,
    split: str = "eval",
    dataset: str = "gsm8k",
    temperature: float = 0.0,
    identical: bool | None = True,
    block: int | None = None,
    policy_time: float = 0.0,
    tau: float | None = None,
) -> RunRecord:
    if block is None and arm.startswith("fixed:"):
        block = int(arm.removeprefix("fixed:"))
    return RunRecord(
        split=split,
        dataset=dataset,
        prompt_id=prompt,
        turn=1,
        temperature=temperature,
        seed=0,
        arm=arm,
        prompt_tokens=5,
        new_tokens=tokens,
        total_time=seconds,
        ttft=seconds / tokens,
        block_size=block,
        tau=tau,
        policy_time=policy_time,
        identical=identical if temperature == 0 else None,
    )
