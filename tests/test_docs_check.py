"""`.ci/check_docs.py` catches what it is there to catch: a figure outside committed results, a copied table row
that its results file does not hold."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_docs", ROOT / ".ci" / "check_docs.py")
check_docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_docs)


def test_the_repository_passes():
    assert check_docs.main() == 0


def test_figures_outside_committed_results_are_reported():
    page = ROOT / "docs" / "index.md"
    assert check_docs.check_figures(page, "![a](results/smollm2-135m/speedup.png) [not a figure](api.md)") == []
    assert "not in a committed results folder" in check_docs.check_figures(page, "![x](../examples/plot.png)")[0]
    assert "not a committed file" in check_docs.check_figures(page, "![x](https://example.com/plot.png)")[0]


def test_a_table_row_missing_from_its_results_file_is_reported():
    source = "benchmarks/results/smollm2-135m-per-step/results.md"
    row = next(line for line in (ROOT / source).read_text().splitlines() if line.startswith("| fixed:1 |"))
    good = f"<!-- table: {source} -->\n\n{row}\n"
    assert check_docs.check_tables(ROOT / "README.md", good) == []
    bad = good.replace("x |", "9.99x |", 1)
    assert "row not in" in check_docs.check_tables(ROOT / "README.md", bad)[0]
