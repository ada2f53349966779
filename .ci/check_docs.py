"""Check README.md and docs/ against the repository: python .ci/check_docs.py

- the README's test command is the one `.ci/run` runs, and its first command runs the demo with torch pinned;
- every figure lies in a committed results folder (one with results.json, results.md or batch.md);
- every table introduced by `<!-- table: PATH -->` is copied from PATH: each of its rows occurs there verbatim.
Exits non-zero with one line per problem. (That every relative link resolves, in every markdown file of the
repository, is a test: tests/test_cards.py.)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
TABLE_SOURCE = re.compile(r"<!-- table: (\S+) -->")
RESULTS_FILES = ("results.json", "results.md", "batch.md")


def shell_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def check_commands(readme: str) -> list[str]:
    """The README's demo and test commands: what a newcomer copies, and what CI runs."""
    blocks = shell_blocks(readme)
    problems = []
    if not blocks or not blocks[0].rstrip().endswith("blockpilot demo") or "torch==2.13.0" not in blocks[0]:
        problems.append("README: the first bash block must install with torch==2.13.0 and end with `blockpilot demo`")
    tests = [line for block in blocks for line in block.splitlines() if "pytest" in line]
    if not tests or tests[0] not in (ROOT / ".ci" / "run").read_text():
        problems.append("README: its test command must appear verbatim in .ci/run")
    return problems


def check_figures(page: Path, text: str) -> list[str]:
    """Each figure is a plot in a committed results folder (docs/results links to benchmarks/results)."""
    problems = []
    for match in FIGURE.finditer(text):
        target = match.group(1)
        if re.match(r"[a-z]+:", target):
            problems.append(f"{page.relative_to(ROOT)}: figure {target} is not a committed file")
            continue
        folder = (page.parent / target).resolve().parent
        if not any((folder / name).is_file() for name in RESULTS_FILES):
            problems.append(f"{page.relative_to(ROOT)}: figure {target} is not in a committed results folder")
    return problems


def table_after(lines: list[str], start: int) -> list[str]:
    """The markdown table rows after line `start` (header and separator included)."""
    rows, i = [], start + 1
    while i < len(lines) and not lines[i].startswith("|"):
        i += 1
    while i < len(lines) and lines[i].startswith("|"):
        rows.append(lines[i].strip())
        i += 1
    return rows


def check_tables(page: Path, text: str) -> list[str]:
    problems = []
    lines = text.splitlines()
    for n, line in enumerate(lines):
        match = TABLE_SOURCE.search(line)
        if not match:
            continue
        source = ROOT / match.group(1)
        if not source.is_file():
            problems.append(f"{page.relative_to(ROOT)}: table source {match.group(1)} does not exist")
            continue
        known = {row.strip() for row in source.read_text().splitlines()}
        rows = table_after(lines, n)
        if not rows:
            problems.append(f"{page.relative_to(ROOT)}:{n + 1}: no table follows its source marker")
        for row in rows:
            if row not in known and not set(row) <= set("|- "):
                problems.append(f"{page.relative_to(ROOT)}: row not in {match.group(1)}: {row}")
    return problems


def main() -> int:
    readme = ROOT / "README.md"
    pages = [readme, *sorted((ROOT / "docs").glob("*.md"))]
    problems = check_commands(readme.read_text())
    for page in pages:
        text = page.read_text()
        problems += check_figures(page, text) + check_tables(page, text)
    for problem in problems:
        print(problem)
    print(f"checked {len(pages)} pages: {'ok' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
