"""The GPU check as one run, every result in one JSON (`gpu_check.sh run` calls this on a CUDA machine).

    python benchmarks/gpu_check.py --out gpu_check.json    # a GPU: ~6 minutes on one H100 (estimated)
    python benchmarks/gpu_check.py --device cpu --tiny     # the same code on toy sizes: the test suite's dry run

On a random-weight target of Qwen3-4B's shape (`--tiny`: the same layout in miniature) with a random drafter of
z-lab's Qwen3-4B-DFlash shape, nothing from the Hub:
(a) float32: every draft shape's greedy output is identical to plain `generate`'s (the lossless promise);
(b) bfloat16: how many of N random prompts give greedy output identical to plain bfloat16 `generate`, per shape;
(c) engine overhead vs bare forwards, and ours vs transformers' DFlash loop (`engine_overhead.py`'s two parts);
(d) `blockpilot calibrate` of that bfloat16 pair on the device (the cost model it caches);
(e) `blockpilot make-policy` end to end on a tiny Qwen3 pair with the real Qwen3 tokenizer (greedy and T=0.6 heads).
The JSON is rewritten after each part, so a run cut short keeps what it measured; a part that fails is
recorded under `errors`, the others still run, and the exit status is non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from engine_overhead import Overhead, VersusInTree, ours_vs_in_tree, overhead_vs_bare_forwards
from tqdm.auto import tqdm

import blockpilot_hf
from blockpilot_hf import BlockPolicy
from blockpilot_hf.cli import main as blockpilot
from blockpilot_hf.decoding.row_attention import wants_row_attention
from blockpilot_hf.jsonfile import load_json, save_json
from blockpilot_hf.policy.config import CostModel
from blockpilot_hf.policy.cost import device_name
from blockpilot_hf.testing_utils import (
    bench_pair,
    drafted_greedy,
    plain_greedy,
    random_prompt,
    tiny_tokenizer,
    write_tiny_qwen3_pair,
)


@dataclass(frozen=True)
class Sizes:
    """How large each part runs: the GPU run's defaults, or `TINY` for the dry run."""

    shape: str = "qwen3-4b"  # a `testing_utils.BENCH_SHAPES` target
    shapes: tuple[str, ...] = ("4", "8", "16", "8+tree16")  # draft shapes of (a), (b) and (d); chains also (c)
    float32_prompts: int = 2
    bfloat16_prompts: int = 8
    prompt_tokens: int = 64
    new_tokens: int = 48
    timing_prompt_tokens: int = 256
    timing_tokens: int = 64
    repeats: int = 3
    calibrate_tokens: int = 32
    calibrate_rounds: int = 2
    policy_prompts: int = 6
    policy_tokens: int = 16


TINY = Sizes(
    shape="tiny",
    bfloat16_prompts=3,
    prompt_tokens=12,
    new_tokens=12,
    timing_prompt_tokens=12,
    timing_tokens=12,
    repeats=1,
    calibrate_tokens=8,
    calibrate_rounds=1,
    policy_prompts=4,
    policy_tokens=6,
)


@dataclass
class Identity:
    """Per draft shape, how many of `prompts` random prompts gave greedy output identical to plain `generate`'s."""

    dtype: str
    prompts: int
    new_tokens: int
    row_attention: bool  # verify attention row by row (half precision on a CPU only; a GPU batches its rows)
    identical: dict[str, int]
    share: dict[str, float]


@dataclass
class PolicyMade:
    """What `make-policy` wrote: its heads, candidates, held-out results and the device its costs were timed on."""

    temperatures: list[float]
    candidate_sizes: list[int]
    cost_device: str
    results: dict[str, float]


@dataclass
class GpuCheck:
    """The one JSON of a run: where it ran, at what sizes, each part's results (None: not reached or failed),
    seconds and errors."""

    environment: dict[str, str | bool]
    sizes: Sizes
    float32: Identity | None = None
    bfloat16: Identity | None = None
    overhead: list[Overhead] = field(default_factory=list)
    versus_transformers: list[VersusInTree] = field(default_factory=list)
    calibrate: CostModel | None = None
    make_policy: PolicyMade | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # part -> the exception that stopped it


def chains(sizes: Sizes) -> list[int]:
    """The chain block sizes among the draft shapes."""
    return [int(s) for s in sizes.shapes if s.isdigit()]


def identity(target, drafter, sizes: Sizes, count: int) -> Identity:
    """(a) / (b): greedy output of each draft shape vs plain `generate`, on `count` random prompts."""
    dtype = str(target.dtype).removeprefix("torch.")
    identical = dict.fromkeys(sizes.shapes, 0)
    for seed in tqdm(range(count), desc=f"identity, {dtype}", unit="prompt"):
        prompt = random_prompt(seed, sizes.prompt_tokens, target.config.vocab_size).to(target.device)
        plain = plain_greedy(target, prompt, sizes.new_tokens)
        for shape in sizes.shapes:
            out = drafted_greedy(target, drafter, prompt, sizes.new_tokens, block_policy=f"fixed:{shape}")
            identical[shape] += bool(torch.equal(out.sequences, plain))
    share = {shape: n / count for shape, n in identical.items()}
    return Identity(dtype, count, sizes.new_tokens, wants_row_attention(target), identical, share)


def save_pair(target, drafter, folder: Path) -> tuple[Path, Path]:
    """`target` (with the tiny tokenizer, which `load_target` reads; calibrate's random prompt never uses it) and
    `drafter` as folders the CLI loads."""
    target_dir, drafter_dir = folder / "target", folder / "drafter"
    target.save_pretrained(target_dir)
    tiny_tokenizer().save_pretrained(target_dir)
    drafter.save_pretrained(drafter_dir)
    return target_dir, drafter_dir


def calibrate(target_dir: Path, drafter_dir: Path, sizes: Sizes, device: str) -> CostModel:
    """(d): `blockpilot calibrate` in bfloat16 on `device`; the cost model it cached (BLOCKPILOT_CACHE)."""
    argv = ["calibrate", "--target", str(target_dir), "--drafter", str(drafter_dir), "--device", device]
    argv += ["--dtype", "bfloat16", "--block-sizes", ",".join(map(str, [1, *chains(sizes)]))]
    trees = [s for s in sizes.shapes if not s.isdigit()]
    if trees:
        argv += ["--shapes", ",".join(trees)]
    argv += ["--new-tokens", str(sizes.calibrate_tokens), "--rounds", str(sizes.calibrate_rounds)]
    blockpilot(argv)
    (path,) = (Path(os.environ["BLOCKPILOT_CACHE"]) / "cost").glob("*.json")
    return load_json(CostModel, path)


def make_policy(work: Path, sizes: Sizes) -> PolicyMade:
    """(e): `blockpilot make-policy --temperatures 0,0.6` on a tiny Qwen3 pair (z-lab-format drafter, real Qwen3
    tokenizer) with a few offline prompts; it runs where accelerate puts it (the GPU when there is one)."""
    target_dir, drafter_dir = write_tiny_qwen3_pair(work / "qwen3-pair")
    prompts = work / "prompts.jsonl"
    questions = [f"What is {i} + {3 * i}? Explain step by step." for i in range(sizes.policy_prompts)]
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": q}) + "\n" for i, q in enumerate(questions)))
    out = work / "policy"
    argv = ["make-policy", "--target", str(target_dir), "--drafter", str(drafter_dir), "--prompts", str(prompts)]
    argv += ["--block-sizes", "1,2,4,8", "--heldout-fraction", "0.5"]
    argv += ["--max-new-tokens", str(sizes.policy_tokens), "--epochs", "20", "--temperatures", "0,0.6"]
    blockpilot([*argv, "--out", str(out)])
    config = BlockPolicy.from_pretrained(out).config
    results = {r.name: r.value for r in config.results}
    return PolicyMade(config.temperatures, config.candidate_sizes, config.cost.device, results)


def environment(device: torch.device, tiny: bool) -> dict[str, str | bool]:
    """Where the run happened: the hardware and the versions that produced the numbers."""
    return {
        "hardware": device_name(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "blockpilot_hf": blockpilot_hf.__version__,
        "tiny": tiny,
    }


def pair(sizes: Sizes, device: torch.device, dtype: torch.dtype):
    """The random target of `sizes.shape` and its drafter, trained at the largest chain, on `device` in `dtype`."""
    gc.collect()  # an enabled model is a reference cycle: free the last pair before building the next
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return bench_pair(sizes.shape, block_size=max(chains(sizes)), device=device, dtype=dtype)


@contextlib.contextmanager
def part(check: GpuCheck, name: str, out: Path) -> Iterator[None]:
    """Time one part and rewrite the JSON after it. A part that fails is recorded in `check.errors` and the run
    goes on, so one failure on a lent GPU loses none of the other results."""
    start = time.perf_counter()
    try:
        yield
    except Exception as err:
        traceback.print_exc()
        check.errors[name] = f"{type(err).__name__}: {err}"
    finally:
        check.seconds[name] = time.perf_counter() - start
        save_json(check, out)
        print(f"== {name}: {check.seconds[name]:.0f} s, written to {out}", flush=True)


def run(device: torch.device, sizes: Sizes, out: Path, work: Path, tiny: bool) -> GpuCheck:
    """Every part in turn (the cheap ones first), the JSON at `out` rewritten after each."""
    check = GpuCheck(environment(device, tiny), sizes)
    with part(check, "float32", out):
        check.float32 = identity(*pair(sizes, device, torch.float32), sizes, sizes.float32_prompts)
    with part(check, "make_policy", out):
        check.make_policy = make_policy(work, sizes)
    target, drafter = pair(sizes, device, torch.bfloat16)
    with part(check, "bfloat16", out):
        check.bfloat16 = identity(target, drafter, sizes, sizes.bfloat16_prompts)
    prompt = random_prompt(0, sizes.timing_prompt_tokens, target.config.vocab_size).to(device)
    tokens, repeats = sizes.timing_tokens, sizes.repeats
    with part(check, "overhead", out), torch.inference_mode():
        check.overhead = [
            overhead_vs_bare_forwards(target, drafter, prompt, tokens, size, repeats) for size in chains(sizes)
        ]
    with part(check, "versus_transformers", out), torch.inference_mode():
        check.versus_transformers = [
            ours_vs_in_tree(target, drafter, prompt, tokens, size, repeats) for size in chains(sizes)
        ]
    with part(check, "calibrate", out):
        target_dir, drafter_dir = save_pair(target, drafter, work / "bench-pair")
        del target, drafter  # calibrate loads its own copy
        gc.collect()
        check.calibrate = calibrate(target_dir, drafter_dir, sizes, device.type)
    return check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (the check) or cpu (with --tiny: a dry run)")
    parser.add_argument("--tiny", action="store_true", help="toy models and few tokens: a dry run in seconds")
    parser.add_argument(
        "--out", default=os.environ.get("GPU_CHECK_JSON", "gpu_check.json"), help="the JSON (env GPU_CHECK_JSON)"
    )
    args = parser.parse_args()
    sizes = TINY if args.tiny else Sizes()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        os.environ["BLOCKPILOT_CACHE"] = str(Path(scratch) / "cache")  # calibrations stay in the run's scratch
        check = run(torch.device(args.device), sizes, Path(args.out), Path(scratch), args.tiny)
    print(f"total {sum(check.seconds.values()):.0f} s; results in {args.out}")
    if check.errors:
        raise SystemExit(f"failed parts: {', '.join(check.errors)} (their errors are in {args.out})")


if __name__ == "__main__":
    main()
