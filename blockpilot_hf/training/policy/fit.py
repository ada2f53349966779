"""`blockpilot train-policy`: fit a BlockPilot head on collected records and write the policy folder.

    blockpilot train-policy runs/collect --out policies/my-policy

Labels are the measured acceptance lengths of every prompt at every size (not one "best size" class), so the
same head serves any cost model: the choice tau(b) / cost(b) is made at run time. A lookup shape's steps cost
more where the text repeats (each copy is verified), so its label is tau priced by the run's own steps
(`PromptRecord.priced_taus`). The regression target is log tau (errors are relative: missing tau 6 by 1 matters
less than missing tau 2 by 1). A held-out share of the prompts (chosen by id hash, so stable across reruns) never
trains and gives the numbers in the card.
"""

from __future__ import annotations

import logging
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ...data import is_heldout
from ...decoding.shape import DraftShape
from ...policy.baselines import best_fixed_size
from ...policy.config import BlockPolicyConfig, CostModel, FeatureSpec
from ...policy.features import PrefillFeatures, stack_features
from ...policy.head import BlockPolicy
from .collected import CollectMeta, PromptRecord, collected_cost, read_records
from .config import FitConfig

if TYPE_CHECKING:
    from .evaluate import EvaluationReport

logger = logging.getLogger(__name__)


def split_records(records: list[PromptRecord], fraction: float) -> tuple[list[PromptRecord], list[PromptRecord]]:
    train = [r for r in records if not is_heldout(r.prompt_id, fraction)]
    heldout = [r for r in records if is_heldout(r.prompt_id, fraction)]
    if not train:
        raise ValueError(
            f"No training prompts left after holding out {fraction:.0%} of {len(records)}; collect more prompts."
        )
    return train, heldout


def policy_config(meta: CollectMeta, config: FitConfig, cost: CostModel, best_fixed: int | None) -> BlockPolicyConfig:
    """The head's config from what the data was collected with."""
    return BlockPolicyConfig(
        features=FeatureSpec(meta.hidden_size, len(meta.target_layer_ids), meta.top_k),
        vocab_size=meta.vocab_size,
        target_layer_ids=meta.target_layer_ids,
        candidate_sizes=meta.block_sizes,
        candidate_shapes=meta.shapes,
        projection_dim=config.projection_dim,
        hidden_sizes=config.hidden_sizes,
        choice=config.choice,
        decision=config.decision,
        target_id=meta.target_id,
        drafter_id=meta.drafter_id,
        training_block_size=meta.training_block_size,
        temperatures=[meta.temperature],
        best_fixed_size=best_fixed,
        cost=cost,
        name=config.name,
    )


def training_tensors(records: list[PromptRecord], spec: FeatureSpec, candidates: list[DraftShape], cost: CostModel):
    """groups (N, G, H), stats (N, S), log tau targets (N, C) for the candidates (block sizes and shapes), each
    tau priced by `cost` (`PromptRecord.priced_taus`)."""
    feats = [PrefillFeatures.from_list(r.features, spec) for r in records]
    groups, stats = stack_features(feats)
    priced = [r.priced_taus(cost) for r in records]
    taus = torch.tensor([[p[c] for c in candidates] for p in priced], dtype=torch.float32)  # (N, C)
    return groups, stats, taus.log()


def fit_head(policy: BlockPolicy, records: list[PromptRecord], config: FitConfig) -> list[float]:
    """Full-batch AdamW on MSE(log tau) of the policy's one head; returns the loss curve. The stats
    standardisation comes from `records`."""
    cfg = policy.config
    groups, stats, target = training_tensors(records, cfg.features, cfg.candidates, cfg.cost)
    (head,) = policy.heads
    head.stats_mean.copy_(stats.mean(dim=0))
    head.stats_std.copy_(stats.std(dim=0, unbiased=False).clamp(min=1e-3))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    losses = []
    policy.train()
    for _ in range(config.epochs):
        loss = torch.nn.functional.mse_loss(policy(groups, stats).log(), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    policy.eval()
    return losses


def fit_policy(
    meta: CollectMeta, records: list[PromptRecord], config: FitConfig, cost: CostModel | None = None
) -> BlockPolicy:
    """A trained head (no held-out split here: pass the training records). `cost` defaults to the collected one."""
    for r in records:
        missing = set(meta.candidates) - set(r.taus())
        if missing:
            raise ValueError(
                f"prompt {r.prompt_id} lacks runs with {', '.join(map(str, sorted(missing)))}; the collect folder is "
                "inconsistent."
            )
    cost = cost or collected_cost(meta, records)
    unpriced = [str(c) for c in meta.candidates if not c.is_chain and str(c) not in cost.shapes]
    if unpriced:
        raise ValueError(
            f"The cost model has no step cost for {', '.join(unpriced)}: take it from a policy that measured those "
            "shapes (--cost-from), or collect without --replay so their steps are timed."
        )
    best = best_fixed_size([r.chain_taus() for r in records], cost, config.choice)
    torch.manual_seed(config.seed)
    policy = BlockPolicy(policy_config(meta, config, cost, best))
    losses = fit_head(policy, records, config)
    logger.info("trained %s on %d prompts: loss %.4f -> %.4f", config.name, len(records), losses[0], losses[-1])
    return policy


def fit_and_evaluate(
    meta: CollectMeta, records: list[PromptRecord], config: FitConfig, cost: CostModel | None = None
) -> tuple[BlockPolicy, list[PromptRecord], list[PromptRecord], EvaluationReport | None]:
    """Fit on all but the held-out share, score the held-out prompts and put the headline numbers in the config;
    returns (policy, training records, held-out records, report or None without held-out prompts)."""
    from ...policy.config import MeasuredResult
    from .evaluate import evaluate_records

    train, heldout = split_records(records, config.heldout_fraction)
    policy = fit_policy(meta, train, config, cost)
    if not heldout:
        return policy, train, heldout, None
    report = evaluate_records(policy, heldout, policy.config.cost, meta.temperature)
    note = f"{len(heldout)} held-out prompts, split of training collect"
    at = f" at T={meta.temperature:g}"
    policy.config.results = [MeasuredResult(f"{h.method} {h.metric}{at}", h.value, note) for h in report.headline()]
    return policy, train, heldout, report


def combine_temperatures(policies: list[BlockPolicy]) -> BlockPolicy:
    """One policy holding the heads of `policies`, each fitted at its own temperature on the same candidates,
    features and drafter; the best fixed size is the lowest temperature's, the results all of theirs."""
    policies = sorted(policies, key=lambda p: p.config.temperatures)
    first = policies[0].config
    temps = [t for p in policies for t in p.config.temperatures]
    if len(set(temps)) != len(temps):
        raise ValueError(f"Two collect folders share a temperature ({temps}): pass one folder per temperature.")
    per_temperature = {"temperatures", "results", "best_fixed_size"}
    for p in policies[1:]:
        differing = [
            f.name
            for f in fields(first)
            if f.name not in per_temperature and getattr(p.config, f.name) != getattr(first, f.name)
        ]
        if differing:
            raise ValueError(
                f"The collect folders differ in more than their temperature: {', '.join(differing)}. Collect every "
                "temperature with the same drafter, candidates and features, and train with one --cost-from."
            )
    results = [r for p in policies for r in p.config.results]
    combined = BlockPolicy(replace(first, temperatures=temps, results=results))
    for head, fitted in zip(combined.heads, (h for p in policies for h in p.heads), strict=True):
        head.load_state_dict(fitted.state_dict())
    return combined.eval()


def train_policy(collect_dirs: list[Path], out: Path, config: FitConfig, cost: CostModel | None = None) -> BlockPolicy:
    """Read one collect folder per temperature, fit a head on each one's non-held-out prompts, measure it on the
    held-out ones, and write one policy folder with every head."""
    policies = []
    for folder in collect_dirs:
        meta, records = read_records(Path(folder))
        if not records:
            raise ValueError(f"{folder} holds no collected prompts yet; run `blockpilot collect` first.")
        policies.append(fit_and_evaluate(meta, records, config, cost)[0])
    policy = combine_temperatures(policies)
    policy.save_pretrained(out)
    return policy
