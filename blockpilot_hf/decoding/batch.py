"""Batched DFlash decoding: B left-padded prompts in one `generate` call, each row at its own block size (or, with
a BlockPilot policy, at the one size that suits the batch best).

    sequences, stats = batched_speculative_generate(target, drafter, input_ids, attention_mask, draft=policy,
                                                    logits_processor=..., stopping_criteria=..., max_length=...,
                                                    do_sample=False, pad_token_id=0)

Design ("holes"): all rows share one target cache and one drafter cache, which grow by the same number of slots
each step. A verify pass writes K slots for every row; the slots a row rejected (and the padding of a row whose
block is shorter than K) stay in the cache as holes that a per-row key mask, `valid`, hides from every later pass.
Positions are per row (the number of tokens the row has committed), so each row sees exactly the keys and rotary
positions it would see decoded alone: nothing is re-run and no cache is copied. A finished row leaves the batch
(its cache rows are dropped), so it stops costing compute.

Each row's committed tokens are the target's own choices given that row's exact prefix (`acceptance.py`), and its
stopping criteria and logits processors see the row as plain batched `generate` does (left padding included), so
every row's output equals plain batched `generate`'s for that row.
"""

from __future__ import annotations

import copy
import time

import torch
from transformers import DynamicCache, LogitsProcessorList, StoppingCriteriaList

from .acceptance import accept_greedy, accept_point_mass
from .engine import BlockChooser, Prefill, _scorer, _Sequence, choose_shape
from .kernels import with_cpu_kernels
from .planner import StepPlanner
from .shape import DraftShape
from .stats import GenerationStats, StepRecord, StepTimer, device_clock

# Logits processors holding one entry per batch row, by class name: the attributes a row's own copy is cut to.
PER_ROW_STATE = {"RepetitionPenaltyLogitsProcessor": ("prompt_ignore_length",)}


@with_cpu_kernels(attention=False)  # batches keep batched attention; `cpu_kernels=False`: no kernels
def batched_speculative_generate(
    target,
    drafter,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    draft: DraftShape | BlockChooser,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    max_length: int,
    do_sample: bool,
    pad_token_id: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, list[GenerationStats]]:
    """Generate for the left-padded rows `input_ids` (B, T) with `attention_mask` (B, T) (0 = padding).

    Returns the sequences (B, T + N), rows that stopped early filled with `pad_token_id` as plain batched
    `generate` fills them, and one `GenerationStats` per row. `draft` is a chain `DraftShape` for every row, or a
    `BlockChooser` called once per row on that row's own `Prefill` (padding removed). Draft/verify times of a step
    are the batch's, recorded in every row that took part in it.
    """
    device = input_ids.device
    start = device_clock(device)
    batch, prompt_len = input_ids.shape
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    final_index = target.config.get_text_config().num_hidden_layers
    mask = attention_mask.bool()
    rows = []
    for i in range(batch):
        buffer = torch.full((1, max_length), pad_token_id, dtype=input_ids.dtype, device=device)
        buffer[0, :prompt_len] = input_ids[i]
        rows.append(_Sequence(buffer, prompt_len, stopping_criteria, None))
    scores = [_scorer(row_processors(logits_processor, batch, i), row) for i, row in enumerate(rows)]

    # 1. Prefill the batch once; positions count only real tokens (as plain `generate` computes them).
    positions = (mask.long().cumsum(-1) - 1).masked_fill(~mask, 1)
    target_cache = DynamicCache(config=target.config)
    out = target(
        input_ids=input_ids,
        attention_mask=mask.long(),
        position_ids=positions,
        cache=target_cache,
        use_cache=True,
        output_hidden_states=drafter.hidden_state_indices + [final_index],
        logits_to_keep=1,
    )
    logits = out.logits[:, -1].float()  # (B, V)
    context = drafter.context_features(out.hidden_states)  # (B, T, n*H)

    # Each row's block size from its own prefill (or one for the batch, see `_row_sizes`), and its first token.
    prefills = [
        Prefill(
            input_ids[i : i + 1, mask[i]],
            logits[i : i + 1],
            out.hidden_states[final_index][i : i + 1, -1],
            context[i : i + 1, mask[i]],
        )
        for i in range(batch)
    ]
    policy_start = time.perf_counter()
    sizes, name = _row_sizes(draft, prefills)
    policy_time = (time.perf_counter() - policy_start) / batch
    stats = [
        GenerationStats(b, name, p.input_ids.shape[1], str(b), policy_time=policy_time)
        for b, p in zip(sizes, prefills, strict=True)
    ]
    for i, row in enumerate(rows):
        row.commit(accept_point_mass([], lambda j, c, i=i: scores[i](logits[i], c), do_sample, generator))
    prefill_time = device_clock(device) - start
    for s in stats:
        s.prefill_time = prefill_time

    # Per-row state of the rows still decoding (`live` maps batch index -> row number), all (b, ...) tensors.
    live = list(range(batch))
    target_valid = mask  # (b, S) which target cache slots hold committed tokens
    next_pos = mask.sum(-1)  # (b,) position of each row's anchor (its last committed token, not yet cached)
    drafter_cache = DynamicCache(config=drafter.config)
    drafter_valid = mask[:, :0]  # (b, S_d) which drafter cache slots hold committed context
    pending, pending_valid, pending_pos = context, mask, positions  # context features not yet in the drafter cache
    use_drafter = max(sizes) > 1
    timer, marks = StepTimer(device), []

    state = (target_valid, next_pos, drafter_valid, pending, pending_valid, pending_pos)
    live, *state = _drop_finished(live, rows, [target_cache], *state)
    while live:
        target_valid, next_pos, drafter_valid, pending, pending_valid, pending_pos = state
        ks = [max(1, min(sizes[r], max_length - rows[r].length)) for r in live]  # never verify past max_length
        width = max(ks)
        anchors = torch.stack([rows[r].ids[0, -1] for r in live])[:, None]  # (b, 1)
        offsets = torch.arange(width, device=device)
        in_block = offsets[None, :] < torch.tensor(ks, device=device)[:, None]  # (b, K): each row's real block

        # 2. Draft every row's block in one drafter pass (a row at block size 1 uses none of it).
        t0 = timer.mark()
        drafts: list[list[int]] = [[] for _ in live]
        if width > 1:
            draft_logits = drafter.draft(
                embed,
                lm_head,
                anchors,
                pending,
                width,
                drafter_cache,
                position_ids=torch.cat([pending_pos, next_pos[:, None] + offsets], dim=1),
                attention_mask=torch.cat([drafter_valid, pending_valid, in_block], dim=1),
            )  # (b, K-1, V)
            drafter_valid = torch.cat([drafter_valid, pending_valid], dim=1)  # the context moved into its cache
            pending, pending_valid, pending_pos = pending[:, :0], pending_valid[:, :0], pending_pos[:, :0]
            choice = draft_logits.argmax(dim=-1).tolist()
            drafts = [choice[b][: k - 1] for b, k in enumerate(ks)]
        t1 = timer.mark()

        # 3. Verify every block in one target pass; a block shorter than K is padded, and the padding is a hole.
        block = torch.full((len(live), width), pad_token_id, dtype=input_ids.dtype, device=device)
        block[:, 0] = anchors[:, 0]
        for b, row_drafts in enumerate(drafts):
            block[b, 1 : 1 + len(row_drafts)] = torch.tensor(row_drafts, dtype=block.dtype, device=device)
        out = target(
            input_ids=block,
            attention_mask=torch.cat([target_valid, torch.ones_like(in_block)], dim=1).long(),
            position_ids=next_pos[:, None] + offsets,
            cache=target_cache,
            use_cache=True,
            output_hidden_states=drafter.hidden_state_indices if use_drafter else False,
            logits_to_keep=0,
        )
        verify_logits = out.logits.float()  # (b, K, V)

        # 4. Accept per row: the target's own tokens, as many as that row's drafts predicted.
        records = []
        greedy = not do_sample and not logits_processor
        choices = verify_logits.argmax(dim=-1).tolist() if greedy else None  # one transfer for the whole batch
        for b, r in enumerate(live):
            row_logits = verify_logits[b, : ks[b]]
            if greedy:
                committed = accept_greedy(drafts[b], choices[b][: ks[b]])
            else:
                committed = accept_point_mass(
                    drafts[b], lambda j, c, r=r, x=row_logits: scores[r](x[j], c), do_sample, generator
                )
            kept = rows[r].commit(committed)
            source = "drafter" if drafts[b] else "target"
            records.append(StepRecord(ks[b], len(committed) - 1, kept, 0.0, 0.0, source))
            stats[r].steps.append(records[-1])
        marks.append((t0, t1, timer.mark(), records))
        verified = torch.tensor([s.accepted + 1 for s in records], device=device)  # anchor + accepted drafts
        accepted_slots = offsets[None, :] < verified[:, None]  # (b, K)

        # 5. Commit: accepted slots become keys, rejected ones holes; positions advance per row; finished rows leave.
        target_valid = torch.cat([target_valid, accepted_slots], dim=1)
        if use_drafter:
            pending = torch.cat([pending, drafter.context_features(out.hidden_states)], dim=1)
            pending_valid = torch.cat([pending_valid, accepted_slots], dim=1)
            pending_pos = torch.cat([pending_pos, next_pos[:, None] + offsets], dim=1)
        next_pos = next_pos + accepted_slots.sum(-1)
        state = (target_valid, next_pos, drafter_valid, pending, pending_valid, pending_pos)
        caches = [target_cache, drafter_cache] if drafter_cache.get_seq_length() else [target_cache]
        live, *state = _drop_finished(live, rows, caches, *state)

    total = device_clock(device) - start  # waits for the device: every mark is now readable
    for t0, t1, t2, records in marks:
        for step in records:
            step.draft_time, step.verify_time = timer.seconds(t0, t1), timer.seconds(t1, t2)
    length = max(row.length for row in rows)
    for row, s in zip(rows, stats, strict=True):
        s.new_tokens, s.total_time = row.length - prompt_len, total
    return torch.cat([row.buffer[:, :length] for row in rows]), stats


def _row_sizes(draft: DraftShape | BlockChooser, prefills: list[Prefill]) -> tuple[list[int], str]:
    """Each row's block size and the chooser's name.

    A chooser whose `choose_batch(prefills)` gives a size (a BlockPilot policy) sets it for every row: each step
    verifies the widest block for every row anyway (a shorter block is padded with holes), so what matters is the
    size with the best predicted throughput of the whole batch. Other choosers are asked row by row."""
    batch_rule = getattr(draft, "choose_batch", None)
    shared = batch_rule(prefills) if batch_rule is not None else None
    if shared is not None:
        return [shared] * len(prefills), draft.name
    sizes = []
    for i, prefill in enumerate(prefills):
        shape, name = choose_shape(draft, prefill)
        if isinstance(shape, StepPlanner):
            raise ValueError(
                f"block_policy {name!r} chooses per step, which runs one request at a time; a batch drafts one chain "
                "size. Give it a `choose_batch` rule, or pass block_size= for batches."
            )
        if not shape.is_chain:
            raise ValueError(
                f"block_policy {name!r} chose draft shape {shape} for row {i}: a batch drafts chains only. Generate "
                "that row on its own, or use a policy whose candidates are block sizes."
            )
        sizes.append(shape.block_size)
    return sizes, name


def _drop_finished(live: list[int], rows: list[_Sequence], caches: list[DynamicCache], *per_row: torch.Tensor):
    """Remove finished rows from the batch: from `live`, from every cache and from each (b, ...) tensor."""
    keep = [b for b, r in enumerate(live) if not rows[r].done]
    if len(keep) == len(live):
        return (live, *per_row)
    index = torch.tensor(keep, dtype=torch.long, device=per_row[0].device)
    for cache in caches:
        cache.batch_select_indices(index)
    return ([live[b] for b in keep], *(t[index] for t in per_row))


def row_processors(processors: LogitsProcessorList, batch: int, row: int) -> LogitsProcessorList:
    """The processors as row `row` of a `batch`-row call sees them. Each row is scored alone (one (1, L) prefix at
    a time), so a processor's per-row state (`PER_ROW_STATE`: one entry per row, such as the repetition penalty's
    padding lengths) is cut to that row's entry, on a shallow copy; a processor that tells rows apart by their
    index in the batch is refused (`check_batch_processors`)."""
    own = LogitsProcessorList()
    for processor in processors:
        names = [n for n in PER_ROW_STATE.get(type(processor).__name__, ()) if _is_per_row(processor, n, batch)]
        if names:
            processor = copy.copy(processor)
            for name in names:
                setattr(processor, name, getattr(processor, name)[row : row + 1])
        own.append(processor)
    return own


def _is_per_row(processor, name: str, batch: int) -> bool:
    value = getattr(processor, name, None)
    return isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == batch
