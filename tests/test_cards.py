"""Model cards: Hub metadata that huggingface_hub parses without complaint, Use snippets that load from anywhere,
and no dead relative links in any Markdown file of the repository."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from blockpilot_hf.cards import CardResult, card_metadata, location_hint
from blockpilot_hf.constants import EMBEDDED_DRAFTER_DIR, EMBEDDED_POLICY_DIR

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_CARDS = [EMBEDDED_DRAFTER_DIR / "README.md", EMBEDDED_POLICY_DIR / "README.md"]


def _load_quietly(path: Path, caplog) -> ModelCard:
    """ModelCard.load, failing on any warning (Python warnings or huggingface_hub's logger)."""
    caplog.clear()
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="huggingface_hub"):
        warnings.simplefilter("error")
        card = ModelCard.load(path)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    return card


@pytest.mark.parametrize("path", SHIPPED_CARDS, ids=lambda p: p.parent.name)
def test_shipped_cards_parse_with_model_index(path, caplog):
    card = _load_quietly(path, caplog)
    assert card.data.library_name == "blockpilot-hf" and card.data.license == "apache-2.0"
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert card.data.model_name == path.parent.name
    assert card.data.eval_results, "results belong in the model-index"
    assert all(r.task_type == "text-generation" and r.metric_value > 0 for r in card.data.eval_results)
    assert "results" not in card.data.to_dict()  # the old custom list is gone


def test_card_metadata_round_trips(tmp_path, caplog):
    results = [
        CardResult("validation tau_b8", 1.5, "held-out answers", "drafting"),
        CardResult("tau_b4", 1.25, "x", "y"),
    ]
    path = tmp_path / "README.md"
    path.write_text(f"---\n{card_metadata('m', 'org/base', ['a', 'b'], results)}\n---\n\n# m\n")
    card = _load_quietly(path, caplog)
    got = [(r.metric_name, r.metric_type, r.metric_value, r.dataset_name, r.task_name) for r in card.data.eval_results]
    assert got == [
        ("validation tau_b8", "validation_tau_b8", 1.5, "held-out answers", "drafting"),
        ("tau_b4", "tau_b4", 1.25, "x", "y"),
    ]
    assert card.data.tags == ["a", "b"]


def test_location_hint_works_from_any_directory(tmp_path):
    assert location_hint(tmp_path / "p", "org/repo") == '"org/repo"'
    assert location_hint(EMBEDDED_POLICY_DIR, None) == "blockpilot_hf.constants.EMBEDDED_POLICY_DIR"
    assert location_hint(tmp_path / "p", None) == '"path/to/p"'


def _markdown_files() -> list[Path]:
    skip = {".venv", "runs", ".git", "build", "dist", ".pytest_cache"}
    return [p for p in ROOT.rglob("*.md") if not skip & set(p.relative_to(ROOT).parts) and "egg-info" not in str(p)]


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(path):
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)  # links in code are code
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    missing = [t for t in local if t and not (path.parent / t).exists()]
    assert not missing, f"{path.relative_to(ROOT)} links files that do not exist: {missing}"


@pytest.mark.slow
def test_shipped_drafter_card_snippet_runs(tmp_path, monkeypatch, capsys):
    """The drafter card's Use snippet, executed as written, from a directory outside the repository."""
    code = re.search(r"```python\n(.*?)```", (EMBEDDED_DRAFTER_DIR / "README.md").read_text(), flags=re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code.replace("max_new_tokens=64", "max_new_tokens=8"), "card", "exec"), {})
    assert capsys.readouterr().out.strip()
