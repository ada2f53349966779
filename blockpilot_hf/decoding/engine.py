"""The DFlash decoding loop for one request: prefill, then draft a block, verify it, commit, crop, repeat.

    tokens, stats = speculative_generate(target, drafter, input_ids, draft=DraftShape(8),
                                         logits_processor=..., stopping_criteria=..., do_sample=False)

Losslessness: every committed token is the target's own choice (argmax, or a sample of its processed
distribution) given exactly the prefix it is committed after; drafts only decide how many of those choices one
target forward can confirm. Stopping criteria run token by token, so EOS / stop strings / max length cut at the
same token as plain `generate`. A half-precision target on a CPU whose products of that dtype are row-independent
verifies with attention computed row by row (`row_attention.py`), so that each verified row rounds as a one-token
step does.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch
from transformers import DynamicCache, LogitsProcessorList, StoppingCriteriaList
from transformers.cache_utils import DynamicSlidingWindowLayer

from .acceptance import accept_greedy, accept_point_mass, accept_rejection
from .kernels import with_cpu_kernels
from .lookup import Copy, find_copy, lookup_draft
from .planner import StepPlan, StepPlanner
from .shape import DraftShape
from .stats import GenerationStats, StepRecord, StepTimer, device_clock
from .tree import DraftTree, accept_tree, add_branch, build_tree, keep_cache_positions, tree_attention_mask


@dataclass
class Prefill:
    """What the target computed on the prompt; a block-size policy reads only this (no extra forward)."""

    input_ids: torch.Tensor  # (1, T)
    logits: torch.Tensor  # (1, V) raw logits of the last prompt position
    last_hidden: torch.Tensor  # (1, H) final (normed) hidden state of the last prompt position
    context: torch.Tensor  # (1, T, n*H) the drafter's context features of the prompt


@runtime_checkable
class BlockChooser(Protocol):
    """What `block_policy` becomes: picks one request's block size, whole `DraftShape`, or a `StepPlanner` that
    chooses at every step, from its `Prefill`, and has a `name` for stats.

    `BlockPolicy`, `FixedPolicy`, `EntropyPolicy` and `PerStepPolicy` follow it; `policy.resolve` wraps a plain
    callable once."""

    name: str

    def __call__(self, prefill: Prefill) -> int | DraftShape | StepPlanner: ...


def choose_shape(draft: DraftShape | BlockChooser, prefill: Prefill) -> tuple[DraftShape | StepPlanner, str]:
    """The request's draft shape (or step planner) and the name its stats record ("fixed:<shape>" for a fixed
    shape, else the chooser's `name`). A chooser's bare block size means a chain of that size."""
    if isinstance(draft, DraftShape):
        return draft, f"fixed:{draft}"
    chosen = draft(prefill)
    return (chosen if isinstance(chosen, (DraftShape, StepPlanner)) else DraftShape(chosen)), draft.name


@dataclass
class _Draft:
    """One step's drafts: a chain `drafts` (with their processed q when sampled from the drafter), or a `tree`;
    `lookup_nodes` are the tree's copied nodes; `plan` is set when a `StepPlanner` chose them."""

    drafts: list[int]
    source: str  # "drafter" (the drafter ran), "lookup" (copied only) or "target" (no drafts)
    tree: DraftTree | None = None
    q: torch.Tensor | None = None
    lookup_nodes: set[int] = field(default_factory=set)
    plan: StepPlan | None = None


@dataclass
class _Sequence:
    """Committed tokens in a preallocated buffer, plus the stop bookkeeping shared by every commit."""

    buffer: torch.Tensor  # (1, max_length)
    length: int
    stopping: StoppingCriteriaList
    streamer: object | None
    done: bool = False

    @property
    def ids(self) -> torch.Tensor:
        return self.buffer[:, : self.length]

    def commit(self, tokens: list[int]) -> int:
        """Append `tokens` up to the first after which a stopping criterion fires; return how many were kept.

        The criteria see every prefix, as if the tokens came one at a time, and their verdicts are read in one go:
        one host read per step on a GPU, not one per token."""
        if not tokens:
            return 0
        start, count = self.length, len(tokens)
        window = self.buffer[0, start : start + count]
        before = window.clone()
        window.copy_(torch.tensor(tokens, dtype=self.buffer.dtype))
        fired = torch.stack([self.stopping(self.buffer[:, : start + k], None).any() for k in range(1, count + 1)])
        stops = fired.tolist()  # (count,): the one host read
        kept = stops.index(True) + 1 if True in stops else count
        self.done = kept < count or stops[-1]
        window[kept:] = before[kept:]  # the buffer past the sequence stays as it was
        self.length = start + kept
        if self.streamer is not None:
            for token in tokens[:kept]:
                self.streamer.put(torch.tensor([token]))
        return kept


def _record_past(cache: DynamicCache) -> None:
    """Let sliding-window layers keep what a verify block adds until the next crop, so a rejected draft can be cut.

    A sliding-window layer normally drops everything older than its window at once; then `crop` cannot roll back
    (transformers' own assisted decoding does the same, after the prefill so a long prompt is not all kept). The
    attention mask still applies the window, so the output is that of the plain model. Full layers ignore it."""
    for layer in cache.layers:
        if isinstance(layer, DynamicSlidingWindowLayer):
            layer.activate_past_recording()


def _target_forward(target, ids: torch.Tensor, cache, hidden_indices: list[int] | None, keep: int, **tree):
    """One target pass over `ids` (1, K) after `cache`; returns float32 logits (K', V) and the hidden states.
    `tree` passes a draft tree's `position_ids` (1, K) and 4D `attention_mask` through."""
    out = target(
        input_ids=ids,
        cache=cache,
        use_cache=True,
        output_hidden_states=hidden_indices or False,
        logits_to_keep=keep,
        **tree,
    )
    return out.logits[0].float(), out.hidden_states


@with_cpu_kernels()  # `cpu_kernels=False` runs the engine without them (decoding/kernels.py)
def speculative_generate(
    target,
    drafter,
    input_ids: torch.Tensor,
    *,
    draft: DraftShape | BlockChooser,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    max_length: int,
    do_sample: bool,
    draft_sampling: bool = False,
    streamer=None,
    generator: torch.Generator | None = None,
    padding: torch.Tensor | None = None,
) -> tuple[torch.Tensor, GenerationStats]:
    """Generate for one row `input_ids` (1, T); returns the full sequence (1, P + T + new) and its statistics.

    `padding` (1, P): left padding that plain `generate` keeps in the sequence its logits processors, stopping
    criteria and streamer see (so `min_new_tokens`, repetition penalty and `max_length` count it), but that the
    models never attend to; it is never fed to them here. `max_length` counts it too.

    `draft` is a fixed `DraftShape`, or a `BlockChooser` that picks one (or a `StepPlanner` that chooses at every
    step) from the `Prefill` (BlockPilot); the stats record the chooser's `name` (or "fixed:<shape>") and the shape
    that ran. `draft_sampling` samples drafts from the drafter and uses rejection sampling; the default drafts
    argmax tokens and accepts them with the exact point-mass rule. A shape's parts:

    - `block_size` k: a chain of k-1 drafted tokens per step, verified in one pass; 1 is plain decoding with no
      drafter pass.
    - `lookup_tokens` n > 0 turns on prompt lookup: a step whose last n-gram recurred earlier in the text drafts up
      to n tokens copied from after the copy instead of running the drafter (a free, model-free draft that is
      accepted by the same exact rules); other steps draft as above.
    - `tree_budget` N verifies a draft tree of up to N nodes instead of the drafter's argmax chain (`tree.py`):
      the most likely continuations under the drafter's per-position distributions, in one target pass. With
      prompt lookup on too, a copied continuation joins that tree as one more branch instead of replacing the
      drafter's step.
    """
    device = input_ids.device
    start = device_clock(device)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    final_index = target.config.get_text_config().num_hidden_layers
    prompt = input_ids if padding is None else torch.cat([padding, input_ids], dim=1)  # (1, P + T)
    seq = _Sequence(torch.empty((1, max_length), dtype=input_ids.dtype, device=device), 0, stopping_criteria, streamer)
    seq.buffer[:, : prompt.shape[1]] = prompt
    seq.length = prompt.shape[1]
    if streamer is not None:
        streamer.put(prompt.cpu())

    # 1. Prefill: the prompt's logits, the drafter's context features and the final hidden state, in one pass.
    target_cache = DynamicCache(config=target.config)
    logits, hidden = _target_forward(
        target, input_ids, target_cache, drafter.hidden_state_indices + [final_index], keep=1
    )
    _record_past(target_cache)
    prefill = Prefill(input_ids, logits, hidden[final_index][:, -1], drafter.context_features(hidden))
    policy_start = time.perf_counter()
    shape, name = choose_shape(draft, prefill)
    planner = shape if isinstance(shape, StepPlanner) else None
    if planner is not None:  # the largest step it may take, for the stats; it chooses within it every step
        shape = DraftShape(planner.max_depth + 1, planner.max_nodes, planner.max_lookup)
    chosen = shape.block_size
    stats = GenerationStats(
        chosen,
        name,
        input_ids.shape[1],
        "per-step" if planner else str(shape),
        policy_time=time.perf_counter() - policy_start,
    )
    context = prefill.context
    score = _scorer(logits_processor, seq)
    first = accept_point_mass([], lambda i, c: score(logits[0], c), do_sample, generator)
    seq.commit(first)
    stats.prefill_time = device_clock(device) - start
    drafter_cache = DynamicCache(config=drafter.config)
    want_hidden = drafter.hidden_state_indices if chosen > 1 else None  # the drafter's features, if it may run
    text_start = prompt.shape[1] - input_ids.shape[1]  # prompt lookup searches the text after any padding

    timer, marks = StepTimer(device), []  # draft and verify times per step, read after the loop (no GPU syncs)
    while not seq.done:
        room = max_length - seq.length  # never verify past the length limit
        anchor = seq.ids[:, -1:]
        # 2. Draft: copy from the text so far (prompt lookup), else one drafter pass (a chain of k-1 tokens, or a
        #    tree of up to `tree_budget` nodes, with the copy as one more branch), else nothing (plain decoding).
        t0 = timer.mark()
        text = seq.buffer[0, text_start : seq.length]

        def run_drafter(k: int, anchor=anchor, context=context) -> torch.Tensor:  # (k-1, V): one pass, block of k
            return drafter.draft(embed, lm_head, anchor, context, k, drafter_cache)[0].float()

        if planner is not None:
            step = _plan_step(planner, text, room, run_drafter)
        else:
            step = _fixed_step(shape, text, room, run_drafter, score, do_sample and draft_sampling, generator)
        drafts, tree, q = step.drafts, step.tree, step.q
        t1 = timer.mark()
        # 3. Verify anchor + drafts in one target pass; a tree's nodes sit at anchor position + depth and see
        #    only their ancestors.
        past = target_cache.get_seq_length()
        block = torch.tensor([[anchor.item(), *drafts]], dtype=seq.buffer.dtype, device=device)
        tree_args = {}
        if tree is not None:
            positions = past + torch.tensor([[0, *tree.depths]], device=device)
            tree_args = dict(
                position_ids=positions, attention_mask=tree_attention_mask(tree, past, target.dtype, device)
            )
        logits, hidden = _target_forward(target, block, target_cache, want_hidden, keep=0, **tree_args)

        # 4. Accept: the target's own tokens, as many as the drafts predicted.
        def score_at(i: int, pending: list[int], rows: torch.Tensor = logits) -> torch.Tensor:
            return score(rows[i], pending)

        if tree is not None:
            committed, path = accept_tree(tree, score_at, do_sample, generator)
        elif q is not None:
            committed = accept_rejection(drafts, q, score_at, generator)
        elif not do_sample and not logits_processor:
            committed = accept_greedy(drafts, logits.argmax(dim=-1).tolist())
        else:
            committed = accept_point_mass(drafts, score_at, do_sample, generator)
        t2 = timer.mark()
        if step.plan is not None:
            planner.observe(step.plan, committed)
        # 5. Commit (stopping criteria token by token), then keep exactly the committed prefix in the target cache:
        #    crop a chain's rejected tail, gather a tree's accepted path.
        accepted = len(committed) - 1
        kept = seq.commit(committed)
        if tree is None:
            target_cache.crop(-(len(drafts) - accepted))
            path = list(range(1, accepted + 1))
        else:
            keep_cache_positions(target_cache, past, path)
        if want_hidden:  # the drafter's next context: what it consumed is cached; keep the rest pending
            verified = drafter.context_features(hidden)[:, [0, *path]]
            context = verified if step.source == "drafter" else torch.cat([context, verified], dim=1)
        from_lookup = sum(node in step.lookup_nodes for node in path)
        stats.steps.append(StepRecord(block.shape[1], accepted, kept, 0.0, 0.0, step.source, from_lookup))
        marks.append((t0, t1, t2))

    stats.new_tokens = seq.length - prompt.shape[1]
    stats.policy_time += planner.seconds if planner is not None else 0.0  # its per-step decisions
    stats.total_time = device_clock(device) - start  # waits for the device: every mark is now readable
    for step, (t0, t1, t2) in zip(stats.steps, marks, strict=True):
        step.draft_time, step.verify_time = timer.seconds(t0, t1), timer.seconds(t1, t2)
    if streamer is not None:
        streamer.end()
    return seq.ids.clone(), stats


def _fixed_step(
    shape: DraftShape, text: torch.Tensor, room: int, run_drafter, score, sample: bool, generator
) -> _Draft:
    """One step of a fixed `shape`: copy from the text so far (prompt lookup), else one drafter pass (a chain of
    k-1 tokens, or a tree of up to `tree_budget` nodes, with the copy as one more branch), else nothing."""
    copied = lookup_draft(text, min(shape.lookup_tokens, room - 1)) if shape.lookup_tokens and room > 1 else []
    if copied and not (shape.tree_budget and shape.block_size > 1):
        return _Draft(copied, "lookup")
    if shape.block_size < 2 or room < 2:
        return _Draft([], "target")
    draft_logits = run_drafter(min(shape.block_size, room))
    if shape.tree_budget:  # the drafter's best continuations, and prompt lookup's as one more branch
        tree = build_tree(draft_logits, shape.tree_budget)
        lookup_nodes = add_branch(tree, copied)
        return _Draft(tree.tokens, "drafter", tree, lookup_nodes=lookup_nodes)
    drafts, q = _propose(draft_logits, score, sample, generator)
    return _Draft(drafts, "drafter", q=q)


def _plan_step(planner: StepPlanner, text: torch.Tensor, room: int, run_drafter) -> _Draft:
    """One step the planner chooses: the copy on offer, a drafter pass if it pays, then the nodes to verify."""
    copy = find_copy(text, min(planner.max_lookup, room - 1)) if planner.max_lookup and room > 1 else Copy()
    draft_logits = None
    if room > 1 and planner.wants_drafter(copy, len(text)):
        draft_logits = run_drafter(min(planner.max_depth + 1, room))
    plan = planner.plan(copy, draft_logits, len(text))
    source = "drafter" if plan.ran_drafter else ("lookup" if len(plan.tree) else "target")
    if plan.is_chain:  # verified as a chain: no tree mask
        return _Draft(plan.tree.tokens, source, lookup_nodes=plan.lookup_nodes, plan=plan)
    return _Draft(plan.tree.tokens, source, plan.tree, lookup_nodes=plan.lookup_nodes, plan=plan)


def _scorer(logits_processor: LogitsProcessorList, seq: _Sequence):
    """Processed scores for a position whose prefix is the committed sequence plus `pending` tokens."""

    def score(logits: torch.Tensor, pending: list[int]) -> torch.Tensor:
        if not logits_processor:
            return logits
        prefix = seq.ids
        if pending:
            prefix = torch.cat([prefix, torch.tensor([pending], dtype=prefix.dtype, device=prefix.device)], dim=1)
        return logits_processor(prefix, logits[None])[0]

    return score


def _propose(draft_logits: torch.Tensor, score, sample: bool, generator) -> tuple[list[int], torch.Tensor | None]:
    """Draft tokens from (k-1, V) logits: argmax (point-mass proposal), or samples with their processed q (n, V).

    A row whose q is not a distribution (NaN / inf logits of a broken drafter, or nothing left after the logits
    processors) ends the drafts there: fewer drafts, so the step commits the target's own token at that position.
    Greedy drafts need no such care: any argmax is just a token the target accepts or not."""
    if not sample:
        return draft_logits.argmax(dim=-1).tolist(), None
    drafts: list[int] = []
    q = torch.empty_like(draft_logits)
    for i in range(draft_logits.shape[0]):
        q[i] = torch.softmax(score(draft_logits[i], drafts), dim=-1)
        if not bool(torch.isfinite(q[i]).all()):
            warnings.warn(
                "The drafter produced non-finite logits; its drafts from there on are dropped (output is unchanged, "
                "only slower). Check the drafter's weights and dtype.",
                RuntimeWarning,
                stacklevel=3,
            )
            return drafts, q[:i]
        drafts.append(int(torch.multinomial(q[i], 1, generator=generator)))
    return drafts, q
