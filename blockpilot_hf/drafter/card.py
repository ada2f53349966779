"""The model card of a drafter folder, filled from its config, its training record and measured results."""

from __future__ import annotations

from pathlib import Path

from ..cards import CardResult, card_metadata, location_hint, render_template
from ..constants import CARD_NAME
from .modeling import DFlashDrafter

TAGS = ("dflash", "speculative-decoding", "blockpilot", "drafter")


def write_drafter_card(
    drafter: DFlashDrafter,
    folder: Path,
    training: str,
    results: dict[str, float],
    results_text: str,
    target_alias: str,
    repo_id: str | None = None,
) -> Path:
    """Write README.md into `folder`: Hub metadata (base model, tags, license, model-index with `results`, each
    measured teacher-forced on held-out answers) and the description; `repo_id` names the Hub repo, if any."""
    cfg = drafter.config
    text = render_template(
        "dflash_drafter.md",
        metadata=card_metadata(
            Path(folder).name,
            cfg.target_model_id,
            TAGS,
            (
                CardResult(k, v, "held-out greedy answers of the target", "drafting (teacher-forced)")
                for k, v in results.items()
            ),
        ),
        name=Path(folder).name,
        target_id=cfg.target_model_id or "unknown",
        target_alias=target_alias,
        target_layer_ids=cfg.target_layer_ids,
        num_layers=cfg.num_hidden_layers,
        hidden_size=cfg.hidden_size,
        num_parameters=f"{sum(p.numel() for p in drafter.parameters()):,}",
        mask_token_id=cfg.mask_token_id,
        block_size=cfg.block_size,
        dtype=str(drafter.dtype).removeprefix("torch."),
        draft_vocab=(
            f"the {cfg.draft_vocab_size:,} most frequent response tokens of its training data (`draft_vocab_ids`); "
            "its head reads only those rows of the target's LM head"
            if cfg.draft_vocab_size
            else "the target's full vocabulary"
        ),
        location=location_hint(folder, repo_id),
        training=training,
        results=results_text,
    )
    path = Path(folder) / CARD_NAME
    path.write_text(text, encoding="utf-8")
    return path
