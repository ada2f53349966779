"""The README's two newcomer commands stay the ones CI runs and the ones the package supports."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _shell_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    test_command = next(line for block in _shell_blocks(readme) for line in block.splitlines() if "pytest" in line)
    assert test_command in (ROOT / ".ci" / "run").read_text()


def test_readme_main_job_is_the_demo_on_the_embedded_default():
    readme = (ROOT / "README.md").read_text()
    first = _shell_blocks(readme)[0]
    assert first.rstrip().endswith("blockpilot demo")
    assert "torch==2.13.0" in first, "an unpinned torch would pull a multi-GB CUDA build"
