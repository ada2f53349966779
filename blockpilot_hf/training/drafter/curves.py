"""Training curves of a drafter run: validation tau against time, first-position accuracy and T=1 acceptance
against data seen."""

from __future__ import annotations

from pathlib import Path

from ...jsonl import read_rows


def read_metrics(path: Path) -> list[dict]:
    """metrics.jsonl rows, keeping the last record of a step written twice (a run resumed from a checkpoint)."""
    by_step: dict[int, dict] = {}
    for row in read_rows(Path(path)):
        by_step[row["step"]] = row
    return [by_step[s] for s in sorted(by_step)]


def plot_training_curves(metrics_path: Path, out: Path) -> Path:
    """PNG with validation tau vs minutes (per block size, and per data source at the training block size), and
    first-position training accuracy and validation acceptance at T=1 vs sequences seen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    # Keys: val_tau_b{size} (all validation answers) and val_tau_b{size}/{source} (one data source).
    keys = sorted({k for r in rows for k in r if k.startswith("val_tau_b")}, key=lambda k: (k.count("/"), k))
    for key in keys:
        points = [(r["minutes"], r[key]) for r in rows if key in r]
        size, _, source = key.removeprefix("val_tau_b").partition("/")
        style = {"linestyle": "--", "marker": "."} if source else {"marker": "o", "linewidth": 2}
        left.plot(*zip(*points, strict=True), label=f"b={size} {source}".strip(), **style)
    left.set(
        xlabel="training minutes (wall clock)",
        ylabel="validation tau",
        title="tau on held-out answers (sampled-*: samples)",
    )
    if left.lines:  # no validation yet (a run stopped early)
        left.legend(fontsize=7)
    trained = [r for r in rows if "acc1" in r]  # step 0 of a warm start holds validation only
    right.plot([r["sequences_seen"] for r in trained], [r["acc1"] for r in trained], alpha=0.4, label="train accuracy")
    for rule in ("sampled", "argmax"):
        points = [(r["sequences_seen"], r[f"val_accept1_t1/{rule}"]) for r in rows if f"val_accept1_t1/{rule}" in r]
        if points:
            right.plot(*zip(*points, strict=True), marker="o", label=f"T=1 acceptance, {rule} drafts")
    right.set(xlabel="sequences seen", ylabel="first position", title="accuracy and T=1 acceptance")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
