"""The policy commands name their drafter like `bench` does ('embedded', a folder or a Hub id, through one
resolver), and check it before loading anything heavy."""

from __future__ import annotations

import pytest

from blockpilot_hf import embedded
from blockpilot_hf.bench import cli as bench_cli
from blockpilot_hf.bench.config import BenchConfig
from blockpilot_hf.cli import main
from blockpilot_hf.constants import CONFIG_NAME, EMBEDDED_DRAFTER_DIR
from blockpilot_hf.embedded import resolve_drafter
from blockpilot_hf.training.policy import cli as policy_cli
from blockpilot_hf.training.policy import collect as collect_module


class Loaded(Exception):
    """Stands in for loading the models: carries the drafter folder the command resolved."""


@pytest.fixture()
def no_model_loads(monkeypatch):
    """Loading a target fails the test; `_load_pair` stops the command, reporting the drafter folder it got."""

    def load_target(*args, **kwargs):
        pytest.fail("the target was loaded before the drafter was checked")

    def load_pair(target_name, drafter_dir, dtype=None, device="cpu"):
        raise Loaded(drafter_dir)

    monkeypatch.setattr(embedded, "load_target", load_target)
    monkeypatch.setattr(policy_cli, "_load_pair", load_pair)
    monkeypatch.setattr(collect_module, "process_state", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_embedded_resolves_to_the_shipped_drafter():
    assert resolve_drafter("embedded") == EMBEDDED_DRAFTER_DIR
    assert (EMBEDDED_DRAFTER_DIR / CONFIG_NAME).is_file()  # committed: a missing asset fails here, not skips
    assert resolve_drafter(str(EMBEDDED_DRAFTER_DIR)) == EMBEDDED_DRAFTER_DIR


def test_a_missing_embedded_drafter_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(embedded, "EMBEDDED_DRAFTER_DIR", tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="the embedded drafter is missing: .*nowhere"):
        resolve_drafter("embedded")


@pytest.mark.parametrize("argv", [["collect", "--out", "unused"], ["make-policy", "--out", "unused"], ["calibrate"]])
@pytest.mark.parametrize("drafter", [[], ["--drafter", "embedded"]])
def test_collect_and_calibrate_accept_the_embedded_drafter(no_model_loads, argv, drafter):
    with pytest.raises(Loaded) as loaded:
        main(argv + drafter)
    assert loaded.value.args[0] == EMBEDDED_DRAFTER_DIR


@pytest.mark.parametrize(
    "command", [["calibrate"], ["collect", "--out", "unused"], ["make-policy", "--out", "unused"], ["bench"]]
)
@pytest.mark.parametrize("kind", ["missing", "not-a-drafter"])
def test_a_bad_drafter_path_is_a_usage_error_before_any_model_loads(
    no_model_loads, monkeypatch, tmp_path, capsys, command, kind
):
    monkeypatch.setattr(bench_cli, "run_bench", lambda *a, **k: pytest.fail("bench ran with a bad drafter"))
    folder = tmp_path / "missing" if kind == "missing" else tmp_path  # tmp_path exists but has no config.json
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--drafter", str(folder)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"blockpilot {command[0]}: error: --drafter {folder}: ")
    assert ("neither an existing folder" if kind == "missing" else f"lacks {CONFIG_NAME}") in error


def test_bench_loads_check_the_drafter_before_the_target(no_model_loads, tmp_path):
    with pytest.raises(FileNotFoundError, match="lacks config.json"):
        bench_cli.load_models(BenchConfig(drafter=str(tmp_path)))


def test_replay_is_refused_by_make_policy_and_cost_from_is_checked(no_model_loads, tmp_path, capsys):
    """make-policy times its greedy collect and replays sampled heads itself, so it refuses --replay before loading
    anything;
    train-policy names a bad --cost-from before reading the collect folder."""
    with pytest.raises(SystemExit) as exit_info:
        main(["make-policy", "--out", "unused", "--replay"])
    assert exit_info.value.code == 2
    assert "name the heads with --temperatures (e.g. 0,0.6)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["train-policy", str(tmp_path), "--out", "unused", "--cost-from", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2
    assert f"--cost-from {tmp_path / 'nowhere'}: " in capsys.readouterr().err
