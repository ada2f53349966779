"""Model-card helpers shared by drafters and policies: Hub metadata (`model-index` included) and templates."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .constants import EMBEDDED_DRAFTER_DIR, EMBEDDED_POLICY_DIR

TEMPLATES = Path(__file__).resolve().parent / "card_templates"
LICENSE = "apache-2.0"
LIBRARY_NAME = "blockpilot-hf"
# What the Use snippet of a shipped asset's card loads it by (a path that works from any directory).
SHIPPED_LOCATIONS = {
    EMBEDDED_DRAFTER_DIR.resolve(): "blockpilot_hf.constants.EMBEDDED_DRAFTER_DIR",
    EMBEDDED_POLICY_DIR.resolve(): "blockpilot_hf.constants.EMBEDDED_POLICY_DIR",
}


@dataclass(frozen=True)
class CardResult:
    """One measured number for the Hub's `model-index`: what was measured, on which data, how."""

    metric: str  # shown name, e.g. "validation tau_b8"
    value: float
    dataset: str  # what it was measured on, e.g. "12 held-out prompts"
    task: str  # what the model does, e.g. "block-size choice"


def card_metadata(model_name: str, base_model: str | None, tags: Iterable[str], results: Iterable[CardResult]) -> str:
    """The YAML front matter of a card, built with huggingface_hub's `ModelCardData` so the Hub parses it."""
    from huggingface_hub import EvalResult, ModelCardData

    eval_results = [  # the Hub groups metrics by (task type, dataset type): one dataset type per data description
        EvalResult(
            task_type="text-generation",
            task_name=r.task,
            dataset_type=_slug(r.dataset, "-"),
            dataset_name=r.dataset,
            metric_type=_slug(r.metric, "_"),
            metric_name=r.metric,
            metric_value=round(float(r.value), 6),
        )
        for r in results
    ]
    data = ModelCardData(
        model_name=model_name,
        library_name=LIBRARY_NAME,
        license=LICENSE,
        base_model=base_model,
        tags=list(tags),
        eval_results=eval_results or None,
    )
    return data.to_yaml()


def _slug(text: str, sep: str) -> str:
    return sep.join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def location_hint(folder: str | Path, repo_id: str | None) -> str:
    """The Python expression a card's Use snippet loads the model by: the Hub id when it has one, the package
    constant for a shipped asset, else a placeholder path the reader fills in; strings in double quotes, as
    `ruff format` writes them."""
    if repo_id:
        return json.dumps(repo_id)
    shipped = SHIPPED_LOCATIONS.get(Path(folder).resolve())
    return shipped or json.dumps(f"path/to/{Path(folder).name}")


def render_template(template: str, **fields) -> str:
    """Fill `blockpilot_hf/card_templates/<template>` (str.format placeholders) with `fields`."""
    return (TEMPLATES / template).read_text(encoding="utf-8").format(**fields)
