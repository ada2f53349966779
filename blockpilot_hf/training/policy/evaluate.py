"""`blockpilot evaluate-policy`: compare a policy with the oracle, the best fixed size, the training size and a
training-free heuristic on held-out collected prompts, per dataset; write a markdown table and plots.

    blockpilot evaluate-policy policies/my-policy runs/collect-heldout --plots runs/plots

Speed is judged two ways: measured tokens/s of the run at the chosen size (noisy on a busy machine), and the
modelled throughput tau / cost(b), each run's steps priced by the cost model of the held-out collection (what the
choice optimises; a replayed collection has no timings, so the policy's own cost model prices it, or the one
passed as `--cost-from`, and measured tokens/s read 0).
Regret = 1 - modelled throughput of the choice / that of the per-prompt oracle.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ...data import is_heldout
from ...decoding.shape import DraftShape
from ...policy.baselines import EntropyPolicy, FixedPolicy, modelled_throughput, oracle_size
from ...policy.config import CostModel
from ...policy.features import PrefillFeatures
from ...policy.head import BlockPolicy
from ...validation import check_policy_fits_collection
from .collected import PromptRecord, collected_cost, read_records

logger = logging.getLogger(__name__)


@dataclass
class MethodScore:
    """How one method did on the prompts of one source ("all" for every prompt)."""

    method: str
    source: str
    prompts: int
    accuracy: float  # share of prompts where the method chose the oracle's size (or shape)
    tau: float  # mean measured tau at the chosen sizes
    tokens_per_second: float  # mean measured tokens/s of the runs at the chosen sizes
    modelled_speed: float  # mean tau / cost(b), tokens per second under the cost model
    regret: float  # mean 1 - modelled speed / oracle's
    mean_size: float  # mean chosen block size (a shape counts its chain length)


@dataclass
class Headline:
    method: str
    metric: str
    value: float


@dataclass
class CandidateScore:
    """One candidate run on every prompt: mean tau, step cost relative to a one-token step, and their ratio (the
    modelled speed-up over plain decoding in the engine)."""

    candidate: DraftShape
    tau: float
    relative_cost: float

    @property
    def tau_per_cost(self) -> float:
        return self.tau / self.relative_cost


@dataclass
class EvaluationReport:
    scores: list[MethodScore]
    choices: dict[str, list[DraftShape]] = field(default_factory=dict)  # method -> choice per prompt (record order)
    candidates: list[CandidateScore] = field(default_factory=list)

    def score(self, method: str, source: str = "all") -> MethodScore:
        return next(s for s in self.scores if s.method == method and s.source == source)

    def headline(self) -> list[Headline]:
        """The few numbers a model card shows: the policy's accuracy, regret and speed vs the best fixed size."""
        mine, fixed = (
            self.score("blockpilot"),
            next(s for s in self.scores if s.method.startswith("best-fixed") and s.source == "all"),
        )
        return [
            Headline("blockpilot", "accuracy vs oracle", mine.accuracy),
            Headline("blockpilot", "regret vs oracle", mine.regret),
            Headline("blockpilot", "mean tau", mine.tau),
            Headline(
                "blockpilot",
                "modelled speed / best fixed",
                mine.modelled_speed / fixed.modelled_speed if fixed.modelled_speed else 0.0,
            ),
        ]

    def markdown(self) -> str:
        rows = [
            "| source | method | prompts | accuracy | tau | tok/s (measured) | tok/s (modelled) | regret | mean size |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for s in self.scores:
            rows.append(
                f"| {s.source} | {s.method} | {s.prompts} | {s.accuracy:.2f} | {s.tau:.2f} | {s.tokens_per_second:.1f} | "
                f"{s.modelled_speed:.1f} | {s.regret:.3f} | {s.mean_size:.1f} |"
            )
        if self.candidates:
            rows += ["", "| candidate | tau | cost (x one-token step) | tau / cost |", "|---|---|---|---|"]
            rows += [
                f"| {c.candidate} | {c.tau:.2f} | {c.relative_cost:.2f} | {c.tau_per_cost:.2f} |"
                for c in self.candidates
            ]
        return "\n".join(rows)


def methods_for(policy: BlockPolicy, temperature: float = 0.0) -> dict[str, object]:
    """The policy (both choice rules, its head for `temperature`) and the baselines, all with
    `choose(features) -> int | DraftShape`: the best fixed size, the training size, every tree / lookup candidate
    as a fixed shape, and the entropy heuristic."""
    cfg = policy.config
    methods: dict[str, object] = {
        "blockpilot": _Rule(policy, cfg.choice, temperature),
        "blockpilot-classifier": _Rule(policy, "classifier", temperature),
    }
    if cfg.best_fixed_size is not None:
        methods[f"best-fixed:{cfg.best_fixed_size}"] = FixedPolicy(cfg.best_fixed_size)
    if cfg.training_block_size in cfg.candidate_sizes:
        methods[f"training-size:{cfg.training_block_size}"] = FixedPolicy(cfg.training_block_size)
    for shape in cfg.candidate_shapes:
        methods[f"fixed:{shape}"] = FixedPolicy(DraftShape.parse(shape))
    methods["entropy"] = EntropyPolicy(cfg.candidate_sizes)
    return methods


@dataclass
class _Rule:
    """The policy under a choice rule, at a temperature."""

    policy: BlockPolicy
    rule: str
    temperature: float

    def choose(self, features: PrefillFeatures) -> int | DraftShape:
        return self.policy.choose(features, rule=self.rule, temperature=self.temperature)


def _score(
    method: str,
    source: str,
    records: list[PromptRecord],
    sizes: list[DraftShape],
    oracle: list[DraftShape],
    cost: CostModel,
) -> MethodScore:
    priced = [r.priced_taus(cost) for r in records]
    speeds = [modelled_throughput(p[b], b, cost) for p, b in zip(priced, sizes, strict=True)]
    best = [modelled_throughput(p[b], b, cost) for p, b in zip(priced, oracle, strict=True)]
    n = len(records)
    return MethodScore(
        method,
        source,
        n,
        accuracy=sum(a == b for a, b in zip(sizes, oracle, strict=True)) / n,
        tau=sum(r.taus()[b] for r, b in zip(records, sizes, strict=True)) / n,
        tokens_per_second=sum(r.run(b).tokens_per_second for r, b in zip(records, sizes, strict=True)) / n,
        modelled_speed=sum(speeds) / n,
        regret=sum(1 - s / o for s, o in zip(speeds, best, strict=True)) / n,
        mean_size=sum(b.block_size for b in sizes) / n,
    )


def evaluate_records(
    policy: BlockPolicy, records: list[PromptRecord], cost: CostModel, temperature: float = 0.0
) -> EvaluationReport:
    """Score every method on `records` (collected at `temperature`), overall and per source, with `cost` pricing
    each choice."""
    if not records:
        raise ValueError("No records to evaluate on.")
    spec = policy.config.features
    features = [PrefillFeatures.from_list(r.features, spec) for r in records]
    methods = methods_for(policy, temperature)
    choices = {name: [DraftShape.parse(m.choose(f)) for f in features] for name, m in methods.items()}
    candidates = policy.config.candidates
    priced = [r.priced_taus(cost) for r in records]
    choices["oracle"] = [oracle_size({c: p[c] for c in candidates}, cost) for p in priced]
    scores = []
    for source in ["all", *sorted({r.source for r in records})]:
        idx = [i for i, r in enumerate(records) if source in ("all", r.source)]
        subset = [records[i] for i in idx]
        for name, sizes in choices.items():
            scores.append(
                _score(name, source, subset, [sizes[i] for i in idx], [choices["oracle"][i] for i in idx], cost)
            )
    return EvaluationReport(scores, choices, candidate_scores(records, candidates, cost))


def candidate_scores(
    records: list[PromptRecord], candidates: list[int | DraftShape], cost: CostModel
) -> list[CandidateScore]:
    """Every candidate as if it were always chosen: its mean tau over `records` and its mean step cost over them
    (`CostModel.run_seconds`)."""
    one = cost.step_seconds(1)
    scores = []
    for c in candidates:
        runs = [r.run(c) for r in records]
        mean_cost = statistics.fmean(cost.run_seconds(c, run.copied) for run in runs)
        scores.append(CandidateScore(DraftShape.parse(c), statistics.fmean(run.tau for run in runs), mean_cost / one))
    return scores


def make_plots(
    policy: BlockPolicy, records: list[PromptRecord], report: EvaluationReport, out: Path, temperature: float = 0.0
) -> list[Path]:
    """Best-size distribution, tau vs size (or shape) per prompt, predicted (by the head for `temperature`) vs
    actual tau; PNG files in `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ...bench.report import block_size_chart

    out.mkdir(parents=True, exist_ok=True)
    sizes = policy.config.candidates
    labels = [str(c) for c in sizes]
    paths = [out / "best_sizes.png", out / "tau_vs_size.png", out / "predicted_vs_actual.png"]

    fig = block_size_chart(plt, report.choices["oracle"], report.choices["blockpilot"], "prompts", sizes)
    fig.savefig(paths[0], dpi=100, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    colors = {s: f"C{i}" for i, s in enumerate(sorted({r.source for r in records}))}
    for r in records:
        ax.plot(labels, [r.taus()[b] for b in sizes], color=colors[r.source], alpha=0.4)
    for source, color in colors.items():
        ax.plot([], [], color=color, label=source)
    ax.set(xlabel="block size / draft shape", ylabel="tau (mean acceptance length)", title="tau per prompt")
    ax.legend()
    fig.savefig(paths[1], dpi=100, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 5))
    spec = policy.config.features
    for r in records:
        predicted = policy.predict_tau(PrefillFeatures.from_list(r.features, spec), temperature)
        measured = r.priced_taus(policy.config.cost) if policy.config.cost else r.taus()  # what the head learns
        ax.scatter([measured[b] for b in sizes], predicted, s=8, color=colors[r.source], alpha=0.6)
    top = max(c.max_tokens for c in sizes)
    ax.plot([1, top], [1, top], color="gray", linewidth=1)
    ax.set(
        xlabel="measured tau (priced per step)", ylabel="predicted tau", title="Predicted vs measured tau (all sizes)"
    )
    fig.savefig(paths[2], dpi=100, bbox_inches="tight")
    plt.close(fig)
    return paths


def evaluate_policy(
    policy_dir: str | Path,
    collect_dir: Path,
    plots: Path | None = None,
    heldout_fraction: float = 0.0,
    cost: CostModel | None = None,
) -> EvaluationReport:
    """Load a policy (a folder, a Hub id or 'embedded') and a held-out collect folder, score everything, optionally
    draw plots. With `heldout_fraction`, only the prompts `train-policy` holds out at that fraction are scored, so
    policies trained on the folder's other prompts are compared on prompts none of them was trained on; `cost`
    prices the runs (default: the folder's timings, or the policy's stored model for a replayed folder), so that
    policies with different stored models are scored alike."""
    from ...embedded import load_policy

    policy = load_policy(policy_dir)
    meta, records = read_records(Path(collect_dir))
    check_policy_fits_collection(policy.config, meta, collect_dir)
    if cost is None:
        cost = policy.config.cost if meta.replayed else collected_cost(meta, records)  # replayed runs are untimed
    if heldout_fraction:
        records = [r for r in records if is_heldout(r.prompt_id, heldout_fraction)]
    report = evaluate_records(policy, records, cost, meta.temperature)
    if plots is not None:
        make_plots(policy, records, report, Path(plots), meta.temperature)
    return report
