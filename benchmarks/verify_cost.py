"""Why float32 decoding steps of a few tokens cost more than they should on some CPUs: the ladder, its cause, the fix.

    python benchmarks/verify_cost.py                       # the embedded SmolLM2-135M, float32 and bfloat16
    python benchmarks/verify_cost.py --threads 1 --repeats 9 --cache 300

(a) The ladder: one target forward over k tokens after a prefilled cache (logits for every position, then the
    k tokens cropped again, as a verify step does), median ms per k and dtype.
(b) The cause: the same products as the model's linear layers (its real weights) timed as `F.linear(x, W)`
    (x @ W.T, MKL's transposed-B kernel, a matrix-vector kernel for one row), as (W @ x.T).T (one row as two,
    one kept) from a row-major x and from a column-major one (what a transposed product hands the next layer,
    which `weight_first` therefore copies row-major), and as oneDNN's linear on a packed copy of W, per number of
    rows (float32 only for the last).
    Printed, not asserted: timings depend on the machine and its load.
(c) The fix: the ladder of (a) again inside `small_row_linears` (what the engine runs its passes in: 1-32 rows
    take the kernel a probe found fastest for their weight shape and row bucket).
(d) The drafter's side (float32): one pass of the shipped drafter drafting a block of 8 inside `small_row_linears`,
    and its head alone (7 rows over its draft vocabulary) as F.linear and as `small_row_forward` takes it.
(e) The price of exact half precision: a bfloat16 verify pass with SDPA's batched attention and inside
    `row_attention` (each query row alone, as the engine verifies in bfloat16 on a CPU), interleaved per k.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
from transformers import DynamicCache

from blockpilot_hf import DFlashDrafter
from blockpilot_hf.constants import EMBEDDED_DRAFTER_DIR
from blockpilot_hf.decoding.row_attention import row_attention
from blockpilot_hf.decoding.small_rows import (
    pack,
    packed_linear,
    small_row_forward,
    small_row_linears,
    weight_first,
)
from blockpilot_hf.embedded import load_smollm2


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def verifier(model, cache_tokens: int):
    """`verify(k)`: one forward over k tokens after `cache_tokens` prefilled ones, cropped again (a verify step)."""
    prompt = torch.randint(100, 10_000, (1, cache_tokens), generator=torch.Generator().manual_seed(0))
    cache = DynamicCache(config=model.config)
    model(input_ids=prompt, cache=cache, use_cache=True, logits_to_keep=1)

    def verify(k: int) -> None:
        model(input_ids=prompt[:, :k], cache=cache, use_cache=True, logits_to_keep=0)
        cache.crop(-k)

    return verify


def forward_ladder(model, sizes: list[int], cache_tokens: int, repeats: int) -> dict[int, float]:
    """Median ms of one forward over k tokens after `cache_tokens` cached ones, per k."""
    verify = verifier(model, cache_tokens)
    return {k: median_ms(lambda k=k: verify(k), repeats) for k in sizes}


def attention_arms(model, sizes: list[int], cache_tokens: int, repeats: int) -> dict[int, tuple[float, float]]:
    """Median ms of a verify pass per k with batched attention and with `row_attention`, the two interleaved."""
    verify = verifier(model, cache_tokens)
    times: dict[tuple[int, bool], list[float]] = {}
    for _ in range(repeats + 1):  # the first round warms up and is dropped
        for k in sizes:
            for rows in (False, True):
                with row_attention(model) if rows else contextlib.nullcontext():
                    start = time.perf_counter()
                    verify(k)
                    times.setdefault((k, rows), []).append(time.perf_counter() - start)
    return {k: tuple(statistics.median(times[k, rows][1:]) * 1e3 for rows in (False, True)) for k in sizes}


def layout_ladder(model, rows: list[int], repeats: int) -> dict[int, tuple[float, float, float, float]]:
    """Median ms of one pass through every distinct linear weight shape of the model (each once), per row count,
    as x @ W.T, as (W @ x.T).T (`weight_first`: one row goes in twice), as W @ x.T with x column-major (its
    transpose row-major), and packed (NaN unless float32)."""
    weights = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            weights.setdefault(tuple(module.weight.shape), module.weight)
    out = {}
    for m in rows:
        xs = [(torch.randn(m, w.shape[1], dtype=w.dtype), w) for w in weights.values()]
        transposed_b = median_ms(lambda xs=xs: [torch.nn.functional.linear(x, w) for x, w in xs], repeats)
        layout = median_ms(lambda xs=xs: [weight_first(w, x) for x, w in xs], repeats)
        column_major = [(x.T.contiguous(), w) for x, w in xs]  # x.T row-major: x itself column-major
        columns_in = median_ms(lambda cs=column_major: [w @ xt for xt, w in cs], repeats)
        packed = float("nan")
        if model.dtype == torch.float32:
            pxs = [(x, pack(w)) for x, w in xs]
            packed = median_ms(lambda pxs=pxs: [packed_linear(p, x) for x, p in pxs], repeats)
        out[m] = (transposed_b, layout, columns_in, packed)
    return out


def drafter_costs(target, cache_tokens: int, repeats: int) -> tuple[float, float, float]:
    """Median ms of one drafter pass at block size 8 after `cache_tokens` of context (inside `small_row_linears`),
    and of its head's product (7 rows, draft vocabulary) as F.linear and as `small_row_forward`."""
    drafter = DFlashDrafter.from_pretrained(EMBEDDED_DRAFTER_DIR)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    width = drafter.config.num_context_layers * drafter.config.hidden_size
    cache = DynamicCache(config=drafter.config)
    anchor = torch.tensor([[7]])
    drafter.draft(embed, lm_head, anchor, torch.randn(1, cache_tokens, width), 8, cache)
    step_context = torch.randn(1, 3, width)  # a step's new context: the tokens the last verify accepted

    def draft() -> None:
        drafter.draft(embed, lm_head, anchor, step_context, 8, cache)
        cache.crop(-step_context.shape[1])

    with small_row_linears(target, drafter):
        whole = median_ms(draft, repeats)
    _, head = drafter.draft_head(lm_head)  # the target's head rows of the draft vocabulary
    hidden = torch.randn(1, 7, head.in_features)
    plain = median_ms(lambda: torch.nn.functional.linear(hidden, head.weight), repeats)
    return whole, plain, median_ms(lambda: small_row_forward(head, hidden), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads; 0 = torch's default")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per measurement")
    parser.add_argument("--cache", type=int, default=300, help="tokens already in the cache")
    parser.add_argument("--sizes", default="1,2,3,4,6,8,12,16", help="comma-separated tokens per pass")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated model dtypes")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"SmolLM2-135M, {args.cache} cached tokens, {torch.get_num_threads()} thread(s), median of {args.repeats}")
    models = {name: load_smollm2(getattr(torch, name))[0] for name in args.dtypes.split(",")}
    with torch.inference_mode():
        print("\n(a) one forward over k tokens, ms\n")
        print("| tokens | " + " | ".join(models) + " |\n|---|" + "---|" * len(models))
        ladders = {name: forward_ladder(model, sizes, args.cache, args.repeats) for name, model in models.items()}
        for k in sizes:
            print(f"| {k} | " + " | ".join(f"{ladders[name][k]:.1f}" for name in models) + " |")
        print("\n(b) the model's distinct linear weight shapes, once each, ms\n")
        print("| dtype | rows | x @ W.T (F.linear) | (W @ x.T).T | same, x column-major | packed |")
        print("|---|---|---|---|---|---|")
        for name, model in models.items():
            for m, (plain, layout, column_major, packed) in layout_ladder(model, sizes, args.repeats).items():
                print(f"| {name} | {m} | {plain:.1f} | {layout:.1f} | {column_major:.1f} | {packed:.1f} |")
        print("\n(c) (a) again inside `small_row_linears` (as the engine runs its passes), ms\n")
        print("| tokens | " + " | ".join(models) + " |\n|---|" + "---|" * len(models))
        fixed = {}
        for name, model in models.items():
            with small_row_linears(model):
                fixed[name] = forward_ladder(model, sizes, args.cache, args.repeats)
        for k in sizes:
            print(f"| {k} | " + " | ".join(f"{fixed[name][k]:.1f}" for name in models) + " |")
        if "float32" in models:
            whole, plain, fast = drafter_costs(models["float32"], args.cache, args.repeats)
            print(
                f"\n(d) float32 drafter pass at block 8: {whole:.1f} ms; its head (7 rows): {plain:.2f} ms as F.linear,"
            )
            print(f"    {fast:.2f} ms with the small-row kernels ({plain / fast:.1f}x)")
        half = {name: model for name, model in models.items() if name != "float32"}
        if half:
            print("\n(e) half precision: a verify pass with batched attention and row by row (exact), ms\n")
            print("| dtype | tokens | batched | row by row | ratio |\n|---|---|---|---|---|")
        for name, model in half.items():
            for k, (batched, rows) in attention_arms(model, sizes, args.cache, args.repeats).items():
                print(f"| {name} | {k} | {batched:.1f} | {rows:.1f} | {rows / batched:.2f} |")


if __name__ == "__main__":
    main()
