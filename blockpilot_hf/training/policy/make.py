r"""`blockpilot make-policy`: from a target and a drafter to a finished policy folder in one command.

    blockpilot make-policy --target Qwen/Qwen3-4B --drafter z-lab/Qwen3-4B-DFlash-b16 \
        --prompts gsm8k:policy,humaneval:policy,mt-bench:policy --block-sizes 1,2,4,8,12,16 \
        --max-new-tokens 256 --out policies/qwen3-4b --push-to blockpilot/qwen3-4b
    accelerate launch -m blockpilot_hf.cli make-policy ...   # collect sharded over GPUs; process 0 does the rest

Steps: collect into OUT/collect, decoding and timing every candidate greedily (resumable: rerun the same command
after a crash) -> for each sampled temperature (`--temperatures`; Qwen3 samples at 0.6 by default), collect into
OUT/collect/t<T> by replaying every candidate on one sampled answer per prompt -> fit one head per temperature on
all prompts but a held-out share, every head priced by the greedy collect's timings -> evaluate on the held-out
prompts against the best fixed size, the drafter's training size, transformers' prompt lookup and the per-prompt
oracle -> write OUT (config, weights, plots and a card with the results, the command, the hardware and the time)
-> upload OUT without collect/ if `--push-to` is given (leave it out to keep the folder local).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ...bench.metrics import geometric_mean
from ...constants import CARD_NAME
from ...decoding.stats import device_clock, tokens_per_second
from ...generation import default_sampling
from ...policy.cost import device_name
from ...policy.head import BlockPolicy
from ..answers import AnswerCache
from .collect import CollectItem, collect, process_state
from .collected import CollectMeta, PromptRecord, read_records
from .config import CollectConfig, FitConfig, MakePolicyJob
from .evaluate import EvaluationReport, make_plots
from .fit import combine_temperatures, fit_and_evaluate

logger = logging.getLogger(__name__)

COLLECT_DIR = "collect"  # inside OUT; local working data, never uploaded
PLOTS_DIR = "plots"
LOOKUP_TOKENS = 10  # transformers' prompt lookup: longest copied draft
RESULTS_MARKER = "<!-- make-policy: results -->"  # where a card template (--card-template) takes the results


@dataclass
class Timings:
    """Wall-clock minutes of each stage, for the card."""

    collect: float = 0.0
    evaluate: float = 0.0  # fit, held-out scoring, prompt lookup runs and plots

    @property
    def total(self) -> float:
        return self.collect + self.evaluate


def prompt_lookup_speedups(target, items: list[CollectItem], max_new_tokens: int) -> list[float]:
    """Per prompt: tokens/s of transformers' prompt lookup over plain greedy `generate`, timed as one adjacent pair."""
    speedups = []
    gen = dict(max_new_tokens=max_new_tokens, do_sample=False)
    for item in items:
        input_ids = torch.tensor([item.input_ids], device=target.device)
        rates = []
        for extra in ({}, {"prompt_lookup_num_tokens": LOOKUP_TOKENS}):
            start = device_clock(target.device)
            with torch.inference_mode():
                out = target.generate(input_ids=input_ids, **gen, **extra)
            rates.append(tokens_per_second(out.shape[1] - input_ids.shape[1], device_clock(target.device) - start))
        speedups.append(rates[1] / rates[0])
    return speedups


def measured_speedup(records: list[PromptRecord], sizes: list[int]) -> float:
    """Geometric mean over prompts of tokens/s at the chosen size over plain generate's (both from collect)."""
    ratios = [
        r.run(b).tokens_per_second / tokens_per_second(r.plain_new_tokens, r.plain_time)
        for r, b in zip(records, sizes, strict=True)
    ]
    return geometric_mean(ratios)


def evaluation_section(report: EvaluationReport, heldout: list[PromptRecord], lookup: list[float]) -> str:
    """The card's results: one row per method on the held-out prompts, then the plots."""
    rows = [
        f"## Evaluation on {len(heldout)} held-out prompts (collected like the training prompts, never trained on)",
        "",
        "| method | speed-up over plain `generate` (measured) | tau | picks the oracle's size | regret vs oracle |",
        "|---|---|---|---|---|",
    ]
    for method, sizes in report.choices.items():
        score = report.score(method)
        rows.append(
            f"| {method} | {measured_speedup(heldout, sizes):.2f}x | {score.tau:.2f} | {score.accuracy:.0%} | "
            f"{score.regret:.3f} |"
        )
    rows.append(f"| prompt lookup (transformers, {LOOKUP_TOKENS} tokens) | {geometric_mean(lookup):.2f}x | | | |")
    rows += [
        "",
        "Speed-ups are geometric means over prompts; regret = 1 - modelled throughput of the choice / the oracle's.",
        "",
        f"![block sizes chosen]({PLOTS_DIR}/best_sizes.png) ![tau vs block size]({PLOTS_DIR}/tau_vs_size.png) "
        f"![predicted vs measured tau]({PLOTS_DIR}/predicted_vs_actual.png)",
    ]
    return "\n".join(rows)


def head_temperatures(job: MakePolicyJob, target) -> list[float]:
    """The temperatures to make heads for: `--temperatures`, else greedy plus the temperature the target samples at
    when `generate` gets no sampling arguments (its generation config; Qwen3: 0.6)."""
    if job.temperatures is not None:
        return job.temperatures
    default = default_sampling(target.generation_config)
    return [0.0] if default is None else sorted({0.0, default[0]})


def sampled_collect_dir(out: Path, temperature: float) -> Path:
    """Where the replayed collect at a sampled temperature goes (inside collect/, so it is never uploaded)."""
    return out / COLLECT_DIR / f"t{temperature:g}"


def heads_section(metas: list[CollectMeta]) -> str:
    """The card's list of heads: which requests each serves and what it was collected on."""
    lines = ["## Heads", ""]
    for meta in metas:
        if meta.temperature == 0:
            lines.append("- T=0 (greedy requests): every candidate decoded and timed on the greedy answers.")
        else:
            sampling = f"top-k {meta.sample_top_k or 'off'}, top-p {meta.sample_top_p:g}"
            lines.append(
                f"- T={meta.temperature:g} (sampled requests): every candidate replayed on one sampled answer per "
                f"prompt ({sampling}), priced by the greedy collect's timings."
            )
    lines.append("")
    lines.append("A request uses the head trained nearest to its temperature.")
    return "\n".join(lines)


def fit_sampled_heads(
    out: Path, temperatures: list[float], greedy: BlockPolicy, fit: FitConfig
) -> tuple[BlockPolicy, list[CollectMeta]]:
    """`greedy` combined with one head per sampled temperature, each fitted on its replayed collect (held-out
    share left out, as for the greedy head) and priced by the greedy head's cost model; and the sampled metas."""
    heads, metas = [greedy], []
    for temperature in temperatures[1:]:
        meta, records = read_records(sampled_collect_dir(out, temperature))
        heads.append(fit_and_evaluate(meta, records, fit, greedy.config.cost)[0])
        metas.append(meta)
    return combine_temperatures(heads), metas


def provenance_section(command: str, hardware: str, timings: Timings, train: int, heldout: int) -> str:
    import transformers

    return "\n".join(
        [
            "## How it was made",
            "",
            f"- Command: `{command}`",
            f"- Hardware: {hardware}; torch {torch.__version__}, transformers {transformers.__version__}",
            f"- Time: {timings.total:.1f} min (collect {timings.collect:.1f}, fit and evaluation "
            f"{timings.evaluate:.1f})",
            f"- Prompts: {train} trained on, {heldout} held out",
        ]
    )


def make_policy(
    target,
    drafter,
    items: list[CollectItem],
    job: MakePolicyJob,
    collect_config: CollectConfig,
    fit: FitConfig,
    command: str,
) -> Path | None:
    """Run every stage and write `job.out`; returns it on the main process (None on the other collect shards)."""
    out = Path(job.out)
    clock = time.perf_counter()
    collect(target, drafter, items, out / COLLECT_DIR, collect_config)
    temperatures = head_temperatures(job, target)
    answers = AnswerCache(target, collect_config.max_new_tokens)
    for temperature in temperatures[1:]:
        sampled = replace(collect_config, replay=True, temperature=temperature)
        collect(target, drafter, items, sampled_collect_dir(out, temperature), sampled, answers=answers)
    if not process_state().is_main_process:
        return None
    timings = Timings(collect=(time.perf_counter() - clock) / 60)

    clock = time.perf_counter()
    meta, records = read_records(out / COLLECT_DIR)
    policy, train, heldout, report = fit_and_evaluate(meta, records, fit)
    if report is None:
        raise ValueError(
            f"None of the {len(records)} prompts fell in the held-out share ({fit.heldout_fraction:.0%}); "
            "collect more prompts (--limit) or raise --heldout-fraction."
        )
    policy, sampled_metas = fit_sampled_heads(out, temperatures, policy, fit)
    by_id = {item.prompt_id: item for item in items}
    lookup = prompt_lookup_speedups(target, [by_id[r.prompt_id] for r in heldout], meta.max_new_tokens)
    make_plots(policy, heldout, report, out / PLOTS_DIR)
    timings.evaluate = (time.perf_counter() - clock) / 60
    hardware = device_name(target.device)
    details = evaluation_section(report, heldout, lookup) + "\n\n"
    details += heads_section([meta, *sampled_metas]) + "\n\n"
    details += provenance_section(command, hardware, timings, len(train), len(heldout))
    policy.save_pretrained(out, repo_id=job.push_to, card_details=details)
    if job.card_template:
        card = out / CARD_NAME
        card.write_text(card_from_template(Path(job.card_template), card, details), encoding="utf-8")
    if job.push_to:
        push_folder(out, job.push_to)
    return out


def read_card_template(path: Path) -> str:
    """A card template's text; refused (ValueError) without the results marker make-policy fills."""
    text = path.read_text(encoding="utf-8")
    if RESULTS_MARKER not in text:
        raise ValueError(f"{path} has no {RESULTS_MARKER!r} line: add it where the results should go.")
    return text


def card_from_template(template: Path, generated: Path, details: str) -> str:
    """The template's card (its prose and metadata) with the generated card's `model-index` results and the
    marker, and everything after it, replaced by `details`."""
    from huggingface_hub import ModelCard

    card = ModelCard(read_card_template(template))
    produced = ModelCard.load(generated)
    card.data.model_name = produced.data.model_name
    card.data.eval_results = produced.data.eval_results
    body = card.text.split(RESULTS_MARKER)[0].rstrip()
    return f"---\n{card.data.to_yaml()}\n---\n{body}\n\n{details}\n"


def push_folder(folder: Path, repo_id: str) -> str:
    """Upload a make-policy folder as model repo `repo_id`, leaving the collect data behind; returns the URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    url = api.create_repo(repo_id, exist_ok=True)
    api.upload_folder(
        repo_id=repo_id,
        folder_path=str(folder),
        ignore_patterns=[f"{COLLECT_DIR}/*"],
        commit_message="Upload BlockPilot policy (blockpilot make-policy)",
    )
    return str(url)
