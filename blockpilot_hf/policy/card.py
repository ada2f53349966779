"""The model card of a policy folder: YAML metadata (library, base model, tags, license, results) + a README."""

from __future__ import annotations

from pathlib import Path

from .config import BlockPolicyConfig

CARD_TEMPLATE = Path(__file__).resolve().parent.parent / "hub_cards" / "blockpilot_policy.md"
LICENSE = "apache-2.0"
TAGS = ("blockpilot", "dflash", "speculative-decoding", "block-size-policy")


def _yaml_metadata(config: BlockPolicyConfig) -> str:
    """YAML front matter; written by hand (a handful of flat keys) to keep pyyaml out of the dependencies."""
    lines = ["library_name: blockpilot-hf", f"license: {LICENSE}"]
    if config.target_id:
        lines += ["base_model:", f"- {config.target_id}"]
    lines += ["tags:", *[f"- {t}" for t in TAGS]]
    if config.results:
        lines.append("results:")
        for r in config.results:
            lines += [f"- name: {r.name!r}", f"  value: {r.value:.6g}"]
    return "\n".join(lines)


def results_table(config: BlockPolicyConfig) -> str:
    if not config.results:
        return "No held-out measurements recorded yet (run `blockpilot evaluate-policy`)."
    rows = ["| metric | value | note |", "|---|---|---|"]
    rows += [f"| {r.name} | {r.value:.4g} | {r.note} |" for r in config.results]
    return "\n".join(rows)


def render_card(config: BlockPolicyConfig, num_parameters: int) -> str:
    """Fill the template in `hub_cards/blockpilot_policy.md` from the config."""
    spec = config.features
    cost = config.cost
    cost_desc = (
        f"{cost.source} on {cost.device}: "
        + ", ".join(f"b={b}: {s * 1e3:.2f} ms" for b, s in zip(cost.block_sizes, cost.seconds, strict=True))
        if cost
        else "none stored (calibrate before use)"
    )
    return CARD_TEMPLATE.read_text(encoding="utf-8").format(
        metadata=_yaml_metadata(config),
        name=config.name,
        target_id=config.target_id or "unknown",
        drafter_id=config.drafter_id or "unknown",
        training_block_size=config.training_block_size,
        candidate_sizes=", ".join(map(str, config.candidate_sizes)),
        choice=config.choice,
        num_parameters=f"{num_parameters:,}",
        feature_desc=(
            f"{spec.num_groups} rows of {spec.hidden_size} (pooled and last-position context of {spec.num_context_layers} "
            f"target layers {config.target_layer_ids}, final hidden state) and {spec.num_stats} last-logit statistics"
        ),
        temperature=config.temperature,
        cost_desc=cost_desc,
        repo_hint=config.name,
        results_table=results_table(config),
    )
