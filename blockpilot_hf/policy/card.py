"""The model card of a policy folder: Hub metadata (library, base model, tags, license, model-index) + a README."""

from __future__ import annotations

from ..cards import CardResult, card_metadata, render_template
from .config import BlockPolicyConfig, CostModel

TAGS = ("blockpilot", "dflash", "speculative-decoding", "block-size-policy")


def _metadata(config: BlockPolicyConfig) -> str:
    results = (CardResult(r.name, r.value, r.note or "held-out prompts", "block-size choice") for r in config.results)
    return card_metadata(config.name, config.target_id, TAGS, results)


def results_table(config: BlockPolicyConfig) -> str:
    if not config.results:
        return "No held-out measurements recorded yet (run `blockpilot evaluate-policy`)."
    rows = ["| metric | value | note |", "|---|---|---|"]
    rows += [f"| {r.name} | {r.value:.4g} | {r.note} |" for r in config.results]
    return "\n".join(rows)


def copy_ladder(cost: CostModel) -> str:
    """The copy ladder in words: ms of a lookup step per tokens it verified."""
    if not cost.copy_sizes:
        return ""
    steps = ", ".join(f"{n}: {s * 1e3:.1f}" for n, s in zip(cost.copy_sizes, cost.copy_seconds, strict=True))
    return f"; a lookup step verifying n tokens, in ms: {steps}"


def render_card(config: BlockPolicyConfig, num_parameters: int, location: str, details: str = "") -> str:
    """Fill the template in `card_templates/blockpilot_policy.md` from the config; `location` is the Python expression
    the Use snippet loads the policy by (see `cards.location_hint`), `details` markdown added at the end."""
    spec = config.features
    cost = config.cost
    cost_desc = (
        f"{cost.source} on {cost.device}: "
        + ", ".join(
            [f"b={b}: {s * 1e3:.2f} ms" for b, s in zip(cost.block_sizes, cost.seconds, strict=True)]
            + [f"{shape}: {s * 1e3:.2f} ms" for shape, s in cost.shapes.items()]
        )
        + copy_ladder(cost)
        if cost
        else "none stored (calibrate before use)"
    )
    return render_template(
        "blockpilot_policy.md",
        metadata=_metadata(config),
        name=config.name,
        target_id=config.target_id or "unknown",
        drafter_id=config.drafter_id or "unknown",
        training_block_size=config.training_block_size,
        candidate_sizes=", ".join(map(str, config.candidates)),
        choice=config.choice,
        num_parameters=f"{num_parameters:,}",
        feature_desc=(
            f"{spec.num_groups} rows of {spec.hidden_size} (pooled and last-position context of {spec.num_context_layers} "
            f"target layers {config.target_layer_ids}, final hidden state) and {spec.num_stats} last-logit statistics"
        ),
        temperatures=", ".join(f"{t:g}" for t in config.temperatures),
        cost_desc=cost_desc,
        location=location,
        results_table=results_table(config),
        details=details,
    )
