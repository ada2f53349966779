"""Model-card helpers shared by drafters and policies: YAML front matter and template filling."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent / "hub_cards"
LICENSE = "apache-2.0"


def yaml_front_matter(
    library_name: str, base_model: str | None, tags: Iterable[str], results: Iterable[tuple[str, float]] = ()
) -> str:
    """A handful of flat YAML keys, written by hand to keep pyyaml out of the dependencies."""
    lines = [f"library_name: {library_name}", f"license: {LICENSE}"]
    if base_model:
        lines += ["base_model:", f"- {base_model}"]
    lines += ["tags:", *[f"- {t}" for t in tags]]
    results = list(results)
    if results:
        lines.append("results:")
        for name, value in results:
            lines += [f"- name: {name!r}", f"  value: {value:.6g}"]
    return "\n".join(lines)


def render_template(template: str, **fields) -> str:
    """Fill `blockpilot_hf/hub_cards/<template>` (str.format placeholders) with `fields`."""
    return (TEMPLATES / template).read_text(encoding="utf-8").format(**fields)
