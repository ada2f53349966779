r"""`blockpilot collect`: decode each prompt at every candidate block size and draft shape; record what happened.

    blockpilot collect --target smollm2 --drafter DRAFTER_DIR --prompts gsm8k:policy,humaneval:policy \
        --block-sizes 1,2,4,6,8,12,16 --shapes 8+tree16,1+lookup10 --max-new-tokens 128 --out runs/collect
    accelerate launch --multi_gpu --num_processes 2 -m blockpilot_hf.cli collect ...  # one shard per process
    torchrun --nproc_per_node 2 -m blockpilot_hf.cli collect ...                     # the same (CPU: gloo)

Per prompt: one plain greedy `generate` (the reference output and time), then one run per candidate through
`generate(block_policy=...)`, whose chooser also records the prefill features the policy will learn from. With
`--replay` the candidates' steps are replayed on the reference instead of decoded (`training/replay.py`): the
same acceptance lengths, without timings; with `--replay --temperature T` the reference is one sampled answer per
prompt, and the replayed lengths are distributed as sampled decoding's.
Each finished prompt is one appended JSON line, so a crash loses at most the prompt in flight; rerunning skips
the prompts already in any shard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ...constants import portable_id
from ...decoding.engine import Prefill
from ...decoding.shape import DraftShape
from ...decoding.tree import TREE_TOP_K, DraftTree, grow_tree
from ...drafter import DFlashDrafter
from ...generation import default_sampling, enable
from ...policy.cost import device_name
from ...policy.features import PrefillFeatures, extract_features, spec_for
from ..answers import AnswerCache, plain_answer, sampling_seed
from ..drafter.target_features import target_pass
from ..replay import draft_matches, replay_shape
from .collected import SHARD_GLOB, CollectMeta, PromptRecord, SizeRun, read_records, shard_writer
from .config import CollectConfig

logger = logging.getLogger(__name__)


@dataclass
class CollectItem:
    """One prompt to collect: its id, source (dataset) and token ids."""

    prompt_id: str
    source: str
    input_ids: list[int]


# A drafter, or a function building one per prompt from the item and its reference greedy output (1, T+N).
DrafterSource = DFlashDrafter | Callable[[CollectItem, torch.Tensor], DFlashDrafter]
# The target's reply text to a chat's input ids (1, T): what a later turn is asked after.
Answer = Callable[[torch.Tensor], str]


class _FeatureRecorder:
    """A `block_policy` chooser that returns a fixed shape and keeps the features of the prefill it saw."""

    def __init__(self, shape: DraftShape, spec):
        self.shape, self.spec, self.features = shape, spec, None
        self.name = f"fixed:{shape}"

    def __call__(self, prefill: Prefill) -> DraftShape:
        self.features = extract_features(prefill, self.spec)
        return self.shape


def collect_prompt(target, drafter: DrafterSource, item: CollectItem, config: CollectConfig) -> PromptRecord:
    """Plain greedy once, then one run per block size and shape; each is checked token for token against plain."""
    input_ids = torch.tensor([item.input_ids], device=target.device)
    plain, plain_time = plain_answer(target, input_ids, config.max_new_tokens)
    model = drafter if isinstance(drafter, DFlashDrafter) else drafter(item, plain)
    spec = spec_for(target, model, config.top_k)
    features: PrefillFeatures | None = None
    runs = []
    for shape in config.candidates:
        recorder = _FeatureRecorder(shape, spec)
        with torch.inference_mode():
            out = target.generate(
                input_ids=input_ids,
                assistant_model=model,
                block_policy=recorder,
                return_dict_in_generate=True,
                max_new_tokens=config.max_new_tokens,
                do_sample=False,
            )
        features = features or recorder.features
        stats = out.blockpilot
        same = out.sequences.shape == plain.shape and bool(torch.equal(out.sequences, plain))
        if not same:
            logger.warning("%s with %s differs from plain greedy generate", item.prompt_id, shape)
        runs.append(
            SizeRun(
                shape.block_size,
                stats.acceptance_lengths,
                stats.new_tokens,
                stats.draft_time,
                stats.verify_time,
                stats.total_time,
                same,
                "" if shape.is_chain else str(shape),
                stats.copied,
            )
        )
    return _record(item, plain, plain_time, features, runs)


def replay_prompt(
    target, drafter: DrafterSource, item: CollectItem, config: CollectConfig, answers: AnswerCache | None = None
) -> PromptRecord:
    """Plain `generate` once (greedy, or one sample at `config.temperature`; from `answers` when it holds it), then
    every candidate's steps replayed on that answer (`training.replay`) instead of decoded: one target pass in all
    rather than one per step and candidate. Runs carry no timings."""
    input_ids = torch.tensor([item.input_ids], device=target.device)
    answers = answers or AnswerCache(target, config.max_new_tokens)
    config = with_target_sampling(config, target)
    seed = sampling_seed(item.prompt_id)
    plain, plain_time = answers.answer(input_ids, config.temperature, seed, config.sample_top_k, config.sample_top_p)
    model = drafter if isinstance(drafter, DFlashDrafter) else drafter(item, plain)
    recorder = _FeatureRecorder(DraftShape(1), spec_for(target, model, config.top_k))
    with torch.inference_mode():  # the prefill the policy reads, exactly as decoding computes it
        target.generate(input_ids=input_ids, assistant_model=model, block_policy=recorder, max_new_tokens=1)
    start, tokens = input_ids.shape[1], plain[0]
    matches, tree_at = answer_drafts(target, model, tokens, start, config.candidates)
    max_length = start + config.max_new_tokens
    runs = []
    for shape in config.candidates:
        steps = replay_shape(shape, tokens, start, max_length, matches, tree_at)
        greedy = config.temperature == 0  # by construction a greedy replay walks the plain greedy output
        name = "" if shape.is_chain else str(shape)
        runs.append(
            SizeRun(
                shape.block_size,
                steps.acceptance_lengths,
                len(tokens) - start,
                0.0,
                0.0,
                0.0,
                greedy,
                name,
                steps.copied,
            )
        )
    return _record(item, plain, plain_time, recorder.features, runs)


def answer_drafts(
    target, drafter: DFlashDrafter, tokens: torch.Tensor, start: int, candidates: list[DraftShape]
) -> tuple[Callable[[int, int], int], Callable[[int, int, int], DraftTree]]:
    """`matches(p, k)`, how many argmax drafts of a block of k anchored at position p (>= `start`) equal `tokens`
    (S,), and `tree_at(p, k, budget)`, the draft tree decoding grows there, from one teacher-forced target pass.
    A candidate's block size costs one batched drafter pass over every anchor, when first asked; a block shrunk
    by the length limit is drafted at its one anchor only."""
    with torch.inference_mode():
        features = target_pass(target, tokens[None], drafter.config.target_layer_ids).features
    embed, head = target.get_input_embeddings(), target.get_output_embeddings().weight
    vocab_ids = drafter.draft_vocab_ids
    if vocab_ids is not None:
        head = head[vocab_ids.to(head.device)]
    sizes = {shape.block_size for shape in candidates}
    top_k = TREE_TOP_K if any(shape.tree_budget for shape in candidates) else 0

    def drafted(anchors: torch.Tensor, k: int) -> list[tuple[int, list, list]]:
        """Per anchor: matching argmax drafts, and each position's top log-probs and token ids (empty: no trees)."""
        with torch.inference_mode():
            drafts = draft_matches(drafter, embed, head, vocab_ids, features, tokens, anchors, k, top_k)
        matched = drafts.matched.tolist()
        if not top_k:
            return [(m, [], []) for m in matched]
        return list(zip(matched, drafts.top_logp.tolist(), drafts.top_ids.tolist(), strict=True))

    by_size: dict[int, list[tuple[int, list, list]]] = {}

    def at(p: int, k: int) -> tuple[int, list, list]:
        if k not in sizes:
            return drafted(torch.tensor([p], device=tokens.device), k)[0]
        if k not in by_size:
            by_size[k] = drafted(torch.arange(start, len(tokens) - 1, device=tokens.device), k)
        return by_size[k][p - start]

    def tree_at(p: int, k: int, budget: int) -> DraftTree:
        _, logp, ids = at(p, k)
        return grow_tree(logp, ids, budget)

    return (lambda p, k: at(p, k)[0]), tree_at


def _record(item: CollectItem, plain: torch.Tensor, plain_time: float, features, runs: list[SizeRun]) -> PromptRecord:
    return PromptRecord(
        item.prompt_id,
        item.source,
        len(item.input_ids),
        plain.shape[1] - len(item.input_ids),
        plain_time,
        features.to_list(),
        runs,
    )


def make_meta(target, drafter: DFlashDrafter, config: CollectConfig) -> CollectMeta:
    rows, hidden = target.get_input_embeddings().weight.shape
    return CollectMeta(
        target_id=getattr(target.config, "name_or_path", "") or "",
        drafter_id=portable_id(getattr(drafter.config, "name_or_path", "") or ""),
        block_sizes=config.block_sizes,
        shapes=config.shapes,
        max_new_tokens=config.max_new_tokens,
        hidden_size=hidden,
        target_layer_ids=list(drafter.config.target_layer_ids),
        vocab_size=rows,
        training_block_size=drafter.config.block_size,
        top_k=config.top_k,
        device=device_name(target.device),
        temperature=config.temperature,
        replayed=config.replay,
        sample_top_k=config.sample_top_k,
        sample_top_p=config.sample_top_p,
    )


def with_target_sampling(config: CollectConfig, target) -> CollectConfig:
    """`config` with an unset top-k / top-p of sampled answers taken from the target's generation config when it
    samples (Qwen3: 20 / 0.95), as its users' sampled requests get them; off when it does not, and at temperature 0."""
    if config.temperature == 0:
        return replace(config, sample_top_k=0, sample_top_p=1.0)
    _, top_k, top_p = default_sampling(target.generation_config) or (0.0, 0, 1.0)
    return replace(
        config,
        sample_top_k=top_k if config.sample_top_k is None else config.sample_top_k,
        sample_top_p=top_p if config.sample_top_p is None else config.sample_top_p,
    )


def process_state():
    """accelerate's `PartialState` for this process (shard index and count; 1 process when run plainly).

    Without CUDA, accelerate only sets up a multi-process CPU group (torchrun / `accelerate launch`) when asked
    for the CPU explicitly; otherwise every process would think it is the only one and collect everything."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available())


def collect(
    target,
    drafter: DrafterSource,
    items: list[CollectItem],
    out: Path,
    config: CollectConfig,
    meta_drafter: DFlashDrafter | None = None,
    answers: AnswerCache | None = None,
) -> list[PromptRecord]:
    """Collect every item not yet in `out` (sharded across accelerate processes); returns this process's new records.

    `meta_drafter` describes the drafter in `collect.json` when `drafter` is a per-prompt factory; `answers` holds
    plain answers a replay reuses (by default, only those of this call)."""
    from tqdm.auto import tqdm

    state = process_state()
    out = Path(out)
    enable(target)
    config = with_target_sampling(config, target)
    answers = answers or AnswerCache(target, config.max_new_tokens, config.answers)
    reference = drafter if isinstance(drafter, DFlashDrafter) else meta_drafter
    if reference is None:
        raise ValueError("Pass `meta_drafter` (a drafter of the same configuration) when `drafter` is a factory.")
    meta = make_meta(target, reference, config)
    if state.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        if any(out.glob(SHARD_GLOB)) or (out / "collect.json").exists():
            CollectMeta.load(out).check_same(meta, out)
        else:
            meta.save(out)
    state.wait_for_everyone()
    done = {r.prompt_id for r in read_records(out)[1]}
    todo = [item for item in items if item.prompt_id not in done]
    shard = shard_writer(out, state.process_index)
    new: list[PromptRecord] = []
    with state.split_between_processes(todo) as mine:
        bar = tqdm(
            mine,
            desc=f"collect[{state.process_index}]",
            unit="prompt",
            disable=not state.is_local_main_process,
        )
        for item in bar:
            if config.replay:
                record = replay_prompt(target, drafter, item, config, answers)
            else:
                record = collect_prompt(target, drafter, item, config)
            shard.append(record)  # one line per prompt, flushed before the next starts
            new.append(record)
            bar.set_postfix(tau_max=f"{max(r.tau for r in record.runs):.2f}")
    state.wait_for_everyone()
    return new


def items_from_prompts(
    tokenizer, spec: str, limit: int | None = None, answer: Answer | None = None, turns: int = 1, skip=frozenset()
) -> list[CollectItem]:
    """Items from "source:split,source:split" (e.g. "gsm8k:policy,humaneval:policy").

    With `turns` > 1, later turns of multi-turn prompts (MT-Bench) are items too, asked after the target's own
    replies to the turns before (`answer`: input ids (1, T) -> reply text), as `blockpilot bench` asks them; their
    ids get a `/turn<t>` suffix. Ids in `skip` (already collected) are left out, and their replies not generated."""
    from tqdm.auto import tqdm

    from ...data import chat_input_ids, load_prompts, turn_id

    if turns > 1 and answer is None:
        raise ValueError("Collecting later turns needs `answer`, the target's reply to the turns before.")
    items = []
    for part in spec.split(","):
        source, _, split = part.strip().partition(":")
        prompts = load_prompts(source, split or "policy", limit)
        # Replies to earlier turns are plain greedy generations (seconds each on a CPU): show them progressing.
        for prompt in tqdm(prompts, desc=f"{source}: earlier turns", unit="prompt", disable=turns == 1, leave=False):
            asked = prompt.turns[:turns]
            ids = [turn_id(prompt.id, t) for t in range(1, len(asked) + 1)]
            replies: list[str] = []
            for t, item_id in enumerate(ids):
                input_ids = chat_input_ids(tokenizer, asked[: t + 1], replies)
                if item_id not in skip:
                    items.append(CollectItem(item_id, prompt.source, input_ids[0].tolist()))
                if any(later not in skip for later in ids[t + 1 :]):
                    replies.append(answer(input_ids))
    return items
