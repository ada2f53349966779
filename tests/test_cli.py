"""The `blockpilot` command line: every command listed, every option with help text and its default shown once,
bad arguments as one-line usage errors (exit 2), documented command lines still parsing, and no torch import."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from blockpilot_hf.cli import COMMANDS, build_parser, main
from blockpilot_hf.cli_args import command_line, configs_from_args
from blockpilot_hf.training.drafter.config import RegenerateConfig

ROOT = Path(__file__).resolve().parents[1]
NAMES = [
    "demo",
    "bench",
    "make-policy",
    "collect",
    "train-policy",
    "evaluate-policy",
    "fit-step-prior",
    "calibrate",
    "regenerate",
    "self-instruct",
    "text-data",
    "train-drafter",
]


def subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def run_blockpilot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "blockpilot_hf.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_help_lists_every_command():
    assert [c.name for c in COMMANDS] == NAMES
    done = run_blockpilot("--help")
    assert done.returncode == 0, done.stderr
    listed = re.findall(r"^ {4}([a-z-]+)", done.stdout, flags=re.MULTILINE)
    assert listed == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_option_has_help_and_shows_its_default_once(name, capsys):
    parser = subparsers()[name]
    options = [a for a in parser._actions if a.dest != "help" and a.help != argparse.SUPPRESS]
    assert options
    with_default = 0
    for action in options:
        assert action.help and action.help.strip(), f"{name} {action.option_strings or action.dest} has no help"
        assert action.help.count("default:") <= 1, action.help
        if action.default not in (None, "", [], argparse.SUPPRESS) and not action.required:
            shown = action.default if not isinstance(action.default, list) else ",".join(map(str, action.default))
            assert action.help.endswith(f"(default: {shown})"), action.help
            with_default += 1
    with pytest.raises(SystemExit) as exit_info:
        main([name, "--help"])
    assert exit_info.value.code == 0
    rendered = " ".join(capsys.readouterr().out.split())  # argparse wraps help text over lines
    assert rendered.count("(default:") == with_default


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--limit", "x"], "argument --limit: invalid int value: 'x'"),
        (["bench", "--block-sizes", "1,two"], "argument --block-sizes: invalid comma-separated int value"),
        (["bench", "--arms", "baseline,turbo"], "Unknown arms ['turbo']"),
        (["demo", "--limit", "0"], "--limit, --max-new-tokens and --repeats must be >= 1"),
        (["collect", "--out", "o", "--prompts", "gsm8k:nosuch"], "'gsm8k' has no 'nosuch' split"),
        (["collect", "--prompts", "gsm8k"], "the following arguments are required: --out"),
        (["train-policy", "runs/c", "--out", "p", "--heldout-fraction", "1.5"], "heldout_fraction must be in [0, 1)"),
        (["evaluate-policy", "policy-only"], "the following arguments are required: collect_dir"),
        (["calibrate", "--rounds", "0"], "--rounds must be >= 1, got 0"),
        (["calibrate", "--shapes", "1+lookup7"], "--shapes 1+lookup7: timing prompt lookup needs --prompts"),
        (["calibrate", "--dtype", "int8"], "--dtype must be one of float32, bfloat16, float16, got 'int8'"),
        (["bench", "--dtype", "fp32"], "--dtype must be one of float32, bfloat16, float16, got 'fp32'"),
        (["demo", "--dtype", "float16"], "--dtype must be one of float32, bfloat16, got 'float16'"),
        (["regenerate", "--out", "r.jsonl", "--dtype", "float8"], "--dtype must be one of float32, bfloat16"),
        (["regenerate", "--out", "r.jsonl", "--sources", "gsm8k,nosuch"], "--sources: nosuch cannot be used"),
        (["text-data", "--out", "t.jsonl", "--limit-per-source", "0"], "--limit-per-source must be >= 1"),
        (["self-instruct", "--out", "s.jsonl", "--two-turn-share", "2"], "--two-turn-share must be in [0, 1]"),
        (["train-drafter", "--mixed-precision", "fp8"], "mixed_precision must be no, bf16, fp16 or auto"),
        (["train-drafter"], "--data is required"),
        (["nosuch"], "invalid choice: 'nosuch'"),
    ],
)
def test_a_bad_argument_is_a_one_line_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    # usage lines (the first starts with "usage:", the rest are indented), then exactly one error line
    assert [line for line in lines if not line.startswith(("usage:", " "))] == [lines[-1]]
    prog = "blockpilot" if argv[0] not in NAMES else f"blockpilot {argv[0]}"
    assert lines[-1].startswith(f"{prog}: error: ") and message in lines[-1], lines[-1]


def test_regenerate_takes_prompt_files_as_sources(tmp_path):
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text('{"id": "a", "turns": ["hi", "and then?"]}\n')
    argv = shlex.split(f"regenerate --out r.jsonl --sources gsm8k,{prompts} --batch-size 48 --dtype bfloat16")
    command = next(c for c in COMMANDS if c.name == "regenerate")
    (config,) = configs_from_args(command, build_parser().parse_args(argv))
    assert config == RegenerateConfig(out="r.jsonl", sources=["gsm8k", str(prompts)], batch_size=48, dtype="bfloat16")


@pytest.mark.parametrize(
    "line",
    [
        "make-policy --target t --drafter d --limit 3 --block-sizes 4,2 --max-new-tokens 8 --out 'my dir' --epochs 5",
        "regenerate --out r.jsonl --sources gsm8k,humaneval --batch-size 48 --dtype bfloat16",
        "bench --arms baseline,per-step --limit 2",
    ],
)
def test_command_line_rebuilds_the_configs(line):
    """`command_line` (the record in make-policy's card) parses back into the very same configs."""
    argv = shlex.split(line)
    command = next(c for c in COMMANDS if c.name == argv[0])
    configs = configs_from_args(command, build_parser().parse_args(argv))
    rebuilt = shlex.split(command_line(argv[0], *configs))
    assert rebuilt[0] == "blockpilot" and len(rebuilt) < len(argv) + 6  # only what differs from the defaults
    assert configs_from_args(command, build_parser().parse_args(rebuilt[1:])) == configs


def documented_command_lines() -> list[str]:
    """`blockpilot` lines of the README and the package's docstrings (continuations joined; elided ones left out)."""
    sources = [ROOT / "README.md", *sorted((ROOT / "blockpilot_hf").rglob("*.py"))]
    found = []
    for path in sources:
        text = re.sub(r"\\\n\s*", " ", path.read_text(encoding="utf-8"))
        for line in text.splitlines():
            line = line.split(" #")[0].strip().lstrip("`").split("`")[0]  # an inline `command` ends at its backtick
            match = re.match(r"^(?:accelerate launch .*?-m blockpilot_hf\.cli|blockpilot) ([a-z-]+\b.*)$", line)
            if match and match.group(1).split()[0] in NAMES and "..." not in line and " | " not in line:
                found.append(match.group(1))
    return found


def test_documented_command_lines_still_parse():
    lines = documented_command_lines()
    assert {line.split()[0] for line in lines} >= {"demo", "bench", "collect", "train-policy", "regenerate"}
    for line in lines:
        argv = shlex.split(line)
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:
            pytest.fail(f"documented command line no longer parses: blockpilot {line}")
        command = next(c for c in COMMANDS if c.name == argv[0])
        configs_from_args(command, args)  # and the configs accept the values


def test_building_the_parser_imports_no_torch():
    code = (
        "import sys, blockpilot_hf.cli; blockpilot_hf.cli.build_parser(); "
        "heavy = [m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_public_api_still_imports_from_the_lazy_package():
    import blockpilot_hf
    from blockpilot_hf import BlockPolicy, DFlashConfig, DFlashDrafter, enable
    from blockpilot_hf.drafter import DFlashDrafter as Direct

    assert DFlashDrafter is Direct and callable(enable) and DFlashConfig.model_type == "dflash"
    assert BlockPolicy.__module__ == "blockpilot_hf.policy.head"
    assert set(blockpilot_hf.__all__) <= set(dir(blockpilot_hf))
    assert blockpilot_hf.embedded.load_target  # submodules by attribute, as the model cards use them
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        blockpilot_hf.nothing_here  # noqa: B018


def test_regenerate_names_a_missing_prompt_file_before_loading_anything(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["regenerate", "--out", "r.jsonl", "--sources", "gsm8k,no/such/prompts.jsonl"])
    assert exit_info.value.code == 2
    assert "--sources: no such prompt file: no/such/prompts.jsonl" in capsys.readouterr().err
