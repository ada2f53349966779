"""The policy commands of `blockpilot`: collect, train-policy, evaluate-policy, calibrate, fit-step-prior,
make-policy.

    blockpilot collect --drafter embedded --prompts gsm8k:policy,humaneval:policy --out runs/collect
    blockpilot train-policy runs/collect --out policies/my-policy
    blockpilot train-policy runs/collect,runs/collect-t1 --out policies/my-policy  # greedy and T=1 heads
    blockpilot evaluate-policy policies/my-policy runs/collect-heldout --plots runs/plots
    blockpilot calibrate --target smollm2 --drafter embedded
    blockpilot fit-step-prior policies/my-policy --target smollm2 --drafter embedded
    blockpilot make-policy --target Qwen/Qwen3-4B --drafter z-lab/Qwen3-4B-DFlash-b16 --out policies/qwen3-4b

Options come from the config dataclasses in `config.py`; torch loads only once a command runs.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ...cli_args import Command, UsageError, checked, command_line
from .config import (
    CalibrateConfig,
    CollectConfig,
    CollectJob,
    EvaluatePolicyConfig,
    FitConfig,
    FitStepPriorConfig,
    MakePolicyJob,
    TrainPolicyJob,
)


def drafter_folder(name: str) -> Path:
    """The local folder of `--drafter` ('embedded', a folder or a Hub id); a bad one is a usage error."""
    from ...embedded import resolve_drafter

    return checked("--drafter", resolve_drafter, name)


def _load_pair(target_name: str, drafter_dir: Path, dtype: str | None = None, device: str = "cpu"):
    """(enabled target, tokenizer, drafter) on `device` ('auto': cuda when available): check the drafter folder
    first, then load the target (in `dtype`, by name; unset = the loader's default)."""
    import torch

    from ...drafter import DFlashDrafter
    from ...embedded import load_target
    from ...generation import enable

    target, tokenizer = load_target(target_name, getattr(torch, dtype) if dtype else None, device)
    drafter = DFlashDrafter.from_pretrained(drafter_dir, dtype=target.dtype).to(target.device)
    return enable(target), tokenizer, drafter


def _collect_inputs(job: CollectJob, config: CollectConfig):
    """(target, drafter, items, answers) on this process's device, the drafter folder checked before the target
    loads. Prompts already in `job.out` are skipped (later turns are asked after greedy replies kept in `answers`)."""
    drafter_dir = drafter_folder(job.drafter)
    from ..answers import AnswerCache
    from .collect import items_from_prompts, process_state
    from .collected import META_NAME, read_records

    target, tokenizer, drafter = _load_pair(job.target, drafter_dir)
    device = process_state().device
    target, drafter = target.to(device), drafter.to(device)
    out = Path(job.out)
    done = {r.prompt_id for r in read_records(out)[1]} if (out / META_NAME).exists() else set()
    answers = AnswerCache(target, config.max_new_tokens, config.answers)
    items = items_from_prompts(tokenizer, job.prompts, job.limit, answers.reply(tokenizer), job.turns, done)
    return target, drafter, items, answers


def run_collect(job: CollectJob, config: CollectConfig) -> None:
    from .collect import collect, process_state

    target, drafter, items, answers = _collect_inputs(job, config)
    state = process_state()
    new = collect(target, drafter, items, Path(job.out), config, answers=answers)
    print(f"process {state.process_index}: collected {len(new)} new prompts into {job.out}")


def load_cost_model(name: str):
    """The `CostModel` in a calibration file (`blockpilot calibrate` prints its path), or the one a policy (folder,
    Hub id, 'embedded') stores."""
    from ...embedded import load_policy
    from ...jsonfile import load_json
    from ...policy.config import CostModel

    if name.endswith(".json"):
        return load_json(CostModel, Path(name))
    return load_policy(name).config.cost


def run_train(job: TrainPolicyJob, config: FitConfig) -> None:
    from .fit import train_policy

    cost = None
    if job.cost_from:
        cost = checked("--cost-from", load_cost_model, job.cost_from)
    folders = [Path(part.strip()) for part in job.collect_dir.split(",") if part.strip()]
    policy = train_policy(folders, Path(job.out), config, cost)
    print(f"wrote {job.out} ({policy.num_parameters():,} parameters)")
    for r in policy.config.results:
        print(f"  {r.name}: {r.value:.4g}")


def run_evaluate(config: EvaluatePolicyConfig) -> None:
    from .evaluate import evaluate_policy

    plots = Path(config.plots) if config.plots else None
    cost = checked("--cost-from", load_cost_model, config.cost_from) if config.cost_from else None
    report = evaluate_policy(config.policy_dir, Path(config.collect_dir), plots, config.heldout_fraction, cost)
    print(report.markdown())


def run_make_policy(job: MakePolicyJob, collect_config: CollectConfig, fit: FitConfig) -> None:
    from .make import make_policy, read_card_template

    if collect_config.replay:
        raise UsageError(
            "make-policy times its greedy collect and replays the sampled ones itself: leave out --replay and "
            "--temperature, and name the heads with --temperatures (e.g. 0,0.6)."
        )
    if job.card_template:  # a bad template fails before any model loads
        checked("--card-template", lambda path: read_card_template(Path(path)), job.card_template)
    command = command_line("make-policy", job, collect_config, fit)
    if fit.name == FitConfig().name:  # unnamed: the policy is called after its folder
        fit = dataclasses.replace(fit, name=Path(job.out).name)
    target, drafter, items, _ = _collect_inputs(job, collect_config)
    out = make_policy(target, drafter, items, job, collect_config, fit, command)
    if out is not None:
        print(f"wrote {out} (card: {out / 'README.md'})" + (f"; pushed to {job.push_to}" if job.push_to else ""))


def run_calibrate(config: CalibrateConfig) -> None:
    drafter_dir = drafter_folder(config.drafter)  # before the target loads: a wrong path fails at once
    import torch

    from ...policy.cost import calibrate, calibration_path
    from .collect import items_from_prompts

    target, tokenizer, drafter = _load_pair(config.target, drafter_dir, config.dtype, config.device)
    prompts = None
    if config.prompts:
        items = items_from_prompts(tokenizer, config.prompts, config.limit)
        prompts = [torch.tensor([item.input_ids]) for item in items]
    cost = calibrate(target, drafter, config.candidates, prompts, config.new_tokens, config.rounds)
    print(json.dumps(dataclasses.asdict(cost), indent=2))
    print(f"cached at {calibration_path(target, drafter)} (train-policy --cost-from takes this file)")


def run_fit_step_prior(config: FitStepPriorConfig) -> None:
    drafter_dir = drafter_folder(config.drafter)
    import torch

    from ...policy import BlockPolicy
    from ...policy.resolve import step_costs_for
    from .collect import items_from_prompts
    from .step_prior import fit_step_prior, write_step_priors

    policy = checked("policy_dir", BlockPolicy.from_pretrained, config.policy_dir)
    target, tokenizer, drafter = _load_pair(config.target, drafter_dir, config.dtype)
    prompts = [torch.tensor([item.input_ids]) for item in items_from_prompts(tokenizer, config.prompts, config.limit)]
    costs = step_costs_for(target, drafter, policy.config.cost)
    priors = [
        fit_step_prior(target, drafter, policy, prompts, t, costs, max_new_tokens=config.max_new_tokens)
        for t in policy.config.temperatures
    ]
    write_step_priors(policy, Path(config.policy_dir), priors)
    print(json.dumps([dataclasses.asdict(p) for p in priors], indent=2))
    print(f"wrote step_priors into {Path(config.policy_dir) / 'config.json'}")


COMMANDS = (
    Command(
        "make-policy",
        "collect, train, evaluate and write (or push) a policy folder in one command",
        run_make_policy,
        (MakePolicyJob, CollectConfig, FitConfig),
    ),
    Command(
        "collect",
        "decode prompts at every block size and record acceptance, timing, features",
        run_collect,
        (CollectJob, CollectConfig),
    ),
    Command(
        "train-policy",
        "fit a BlockPilot policy on collect folders (one head per temperature)",
        run_train,
        (TrainPolicyJob, FitConfig),
        positional=("collect_dir",),
    ),
    Command(
        "evaluate-policy",
        "score a policy against oracle and fixed sizes on held-out data",
        run_evaluate,
        (EvaluatePolicyConfig,),
        positional=("policy_dir", "collect_dir"),
    ),
    Command(
        "fit-step-prior",
        "measure a policy's per-step prior (acceptance by drafter confidence, of copies) on its prompts",
        run_fit_step_prior,
        (FitStepPriorConfig,),
        positional=("policy_dir",),
    ),
    Command(
        "calibrate",
        "measure step cost per block size and draft shape on this machine (cached)",
        run_calibrate,
        (CalibrateConfig,),
    ),
)
