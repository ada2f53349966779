"""DFlash drafter training for any HF causal LM target (the public SpecForge recipe, on any device via accelerate).

    blockpilot train-drafter --target smollm2 --data runs/regen/smollm2.jsonl --out runs/drafter

Frozen: the target, its embeddings and LM head. Trained: the drafter. Each sequence gives many anchored blocks
that go through one forward with the block attention mask; the loss is decay-weighted cross-entropy through the
target's LM head on block positions 1..K-1. Target features are computed once per sequence and cached on disk.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import get_cosine_schedule_with_warmup

from ...data import is_heldout
from ...decoding.stats import mean_acceptance_length
from ...drafter import DFlashConfig, DFlashDrafter
from ...jsonl import JsonlWriter, read_rows
from ...policy.cost import device_name
from ..replay import draft_matches, walk
from .blocks import build_blocks, decay_weights, sample_anchors
from .config import DrafterTrainingConfig
from .target_features import FeatureCache, TargetPass

logger = logging.getLogger(__name__)

METRICS_NAME = "metrics.jsonl"


SAMPLED = "sampled-"  # source prefix of sampled answers: their tau is the realized tau of sampled decoding


@dataclass
class TrainingSequence:
    """One prompt + response; the loss covers the response only."""

    id: str
    source: str  # the data source before any '/': gsm8k, self-instruct, text-pydocs, sampled-gsm8k, ...
    tokens: torch.Tensor  # (S,)
    response_start: int
    kind: str  # "greedy" or "sampled": the target's own answer; "text": offline text labelled by the target

    @property
    def answer(self) -> bool:
        """The target's own answer (greedy or sampled), not borrowed text: replaying on it measures tau."""
        return self.kind != "text"


def load_sequences(paths: list[str]) -> list[TrainingSequence]:
    """The rows of regenerated JSONL files with at least 4 response tokens; a row seen twice (same id and kind)
    is used once. A sampled answer's source gets the `sampled-` prefix, so it is counted and validated apart
    from the greedy answer to the same prompt."""
    rows, seen = [], set()
    for path in paths:
        for row in read_rows(Path(path)):
            row.setdefault("kind", "greedy")
            if (row["id"], row["kind"]) not in seen:
                seen.add((row["id"], row["kind"]))
                rows.append(row)
    sequences = []
    for r in rows:
        if len(r["response_ids"]) < 4:
            continue
        kind = r["kind"]
        source = r.get("source", r["id"]).split("/")[0]
        tokens = torch.tensor(r["prompt_ids"] + r["response_ids"])
        sequences.append(
            TrainingSequence(
                r["id"], SAMPLED + source if kind == "sampled" else source, tokens, len(r["prompt_ids"]), kind
            )
        )
    return sequences


def validation_split(
    sequences: list[TrainingSequence], percent: int, per_source: int
) -> tuple[list[TrainingSequence], dict[str, list[TrainingSequence]]]:
    """(train, validation by source): the target's answers held out by id hash (a prompt's greedy and sampled
    answers on the same side), at most `per_source` per source kept for measuring (the rest of the held-out ones
    are simply not trained on)."""
    train, val = [], {}
    for seq in sequences:
        if seq.answer and is_heldout(seq.id, percent / 100):
            val.setdefault(seq.source, []).append(seq)
        else:
            train.append(seq)
    return train, {source: seqs[:per_source] for source, seqs in sorted(val.items())}


def make_drafter(cfg: DrafterTrainingConfig, target) -> DFlashDrafter:
    """The drafter to train: `cfg.init_from`'s weights (warm start), or a random one shaped after the target
    (hidden size, heads) with the recipe's depth."""
    if cfg.init_from:
        return warm_start(cfg, target)
    tc = target.config.get_text_config()
    depth = tc.num_hidden_layers
    layer_ids = cfg.target_layer_ids
    if layer_ids is None:
        from ...drafter import default_target_layer_ids

        layer_ids = default_target_layer_ids(depth, cfg.num_context_layers)
    config = DFlashConfig(
        hidden_size=tc.hidden_size,
        intermediate_size=tc.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads,
        head_dim=getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads,
        vocab_size=target.get_input_embeddings().weight.shape[0],
        rms_norm_eps=tc.rms_norm_eps,
        rope_parameters=dict(tc.rope_parameters or {}) or None,
        max_position_embeddings=tc.max_position_embeddings,
        block_size=cfg.block_size,
        mask_token_id=cfg.mask_token_id if cfg.mask_token_id is not None else pick_mask_token(target),
        target_layer_ids=layer_ids,
        num_target_layers=depth,
        target_model_id=getattr(target.config, "name_or_path", None),
    )
    return DFlashDrafter(config)


def warm_start(cfg: DrafterTrainingConfig, target) -> DFlashDrafter:
    """Load `cfg.init_from` in float32, refusing one whose shape disagrees with the config or the target; one
    shallower than `cfg.num_layers` is grown to that depth (`grow`)."""
    from ...embedded import resolve_drafter
    from ...validation import check_compatible

    drafter = DFlashDrafter.from_pretrained(resolve_drafter(cfg.init_from), dtype=torch.float32)
    if drafter.config.block_size != cfg.block_size:
        raise ValueError(
            f"--init-from {cfg.init_from} has block_size={drafter.config.block_size} but the config asks for "
            f"{cfg.block_size}; pass --block-size {drafter.config.block_size}."
        )
    if drafter.config.num_hidden_layers > cfg.num_layers:
        raise ValueError(
            f"--init-from {cfg.init_from} has {drafter.config.num_hidden_layers} layers but the config asks for "
            f"{cfg.num_layers}; a warm start keeps or adds layers: pass --num-layers "
            f"{drafter.config.num_hidden_layers} or more."
        )
    check_compatible(target, drafter)
    return grow(drafter, cfg.num_layers)


def grow(drafter: DFlashDrafter, num_layers: int) -> DFlashDrafter:
    """`drafter` deepened to `num_layers`: its own layers, then new ones whose output projections (attention
    `o_proj`, MLP `down_proj`) start at zero. A new layer then adds nothing to the residual stream, so the deeper
    drafter starts out drafting exactly what the shallower one did, and training builds on it."""
    have = drafter.config.num_hidden_layers
    if num_layers == have:
        return drafter
    config = copy.deepcopy(drafter.config)
    config.num_hidden_layers = num_layers
    config.layer_types = [*config.layer_types, *config.layer_types[-1:] * (num_layers - have)]  # new: as the last
    grown = DFlashDrafter(config).to(torch.float32)
    loaded = grown.load_state_dict(drafter.state_dict(), strict=False)
    new = {k for k in grown.state_dict() if k.startswith("layers.") and int(k.split(".")[1]) >= have}
    if loaded.unexpected_keys or set(loaded.missing_keys) != new:
        raise ValueError(
            f"Cannot grow the drafter: weights {loaded.unexpected_keys or loaded.missing_keys} do not fit."
        )
    with torch.no_grad():
        for layer in grown.layers[have:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return grown


def pick_mask_token(target) -> int:
    """An embedding row to stand for 'unknown': the pad id if it differs from EOS, else the last row."""
    rows = target.get_input_embeddings().weight.shape[0]
    pad, eos = target.generation_config.pad_token_id, target.generation_config.eos_token_id
    return pad if isinstance(pad, int) and pad != eos else rows - 1


def sequence_loss(
    drafter, embed, head_weight, target_out: TargetPass, seq: TrainingSequence, cfg, weights, vocab_map, generator
):
    """Decay-weighted loss of one sequence's anchored blocks, plus first-position accuracy. The loss mixes
    cross-entropy to the target's argmax (hard labels) with cross-entropy to its top-k distribution (soft labels,
    weight `cfg.distill_weight`)."""
    K = cfg.block_size
    anchors = sample_anchors(seq.response_start, len(seq.tokens), cfg.anchors_per_sequence, generator)
    features = target_out.features
    tokens = seq.tokens.to(features.device)
    batch = build_blocks(tokens, target_out.predictions, anchors, K, drafter.config.mask_token_id, seq.response_start)
    A = len(anchors)
    noise = embed(batch.block_ids)  # (A, K, H)
    hidden = drafter(
        noise, features[None].to(noise.dtype), position_ids=batch.position_ids, attention_mask=batch.attention_mask
    ).last_hidden_state[:, 1:]  # (A, K-1, H): position 0 is the anchor itself
    labels = (
        batch.labels if vocab_map is None else vocab_map[batch.labels.clamp_min(0)].masked_fill(batch.labels < 0, -100)
    )
    logprobs = torch.log_softmax((hidden @ head_weight.T).float(), dim=-1)  # (A, K-1, V')
    loss_at = F.nll_loss(logprobs.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="none").view(A, K - 1)
    if cfg.distill_weight:
        positions = (batch.anchors[:, None] + torch.arange(1, K, device=tokens.device)).clamp(max=len(tokens) - 1)
        loss_at = (1 - cfg.distill_weight) * loss_at + cfg.distill_weight * soft_label_loss(
            logprobs, target_out.top_logprobs[positions], target_out.top_ids[positions], vocab_map
        )
    w = weights[None, :] * (labels != -100)
    loss = (loss_at * w).sum() / w.sum().clamp_min(1e-6)
    valid = labels[:, 0] != -100
    acc = ((logprobs[:, 0].argmax(-1) == labels[:, 0]) & valid).sum() / valid.sum().clamp_min(1)
    return loss, float(acc)


def soft_label_loss(
    logprobs: torch.Tensor, top_logprobs: torch.Tensor, top_ids: torch.Tensor, vocab_map: torch.Tensor | None
) -> torch.Tensor:
    """Cross-entropy (A, K-1) from the target's top-k distribution to the drafter's `logprobs` (A, K-1, V').
    The target's tokens outside the drafter's vocabulary are dropped and the rest renormalised: the drafter can
    only match the target where it can draft at all."""
    if vocab_map is not None:
        top_ids = vocab_map[top_ids.long()]
        top_logprobs = top_logprobs.masked_fill(top_ids < 0, float("-inf"))
    p = torch.softmax(top_logprobs.float(), dim=-1).nan_to_num(0.0)  # a row with no drafter token: all zero
    return -(p * logprobs.gather(-1, top_ids.long().clamp_min(0))).sum(-1)


@torch.no_grad()
def replay(
    drafter, embed, head: torch.Tensor, vocab_ids: torch.Tensor | None, target_out: TargetPass, seq, block_size: int
) -> tuple[list[int], torch.Tensor]:
    """Greedy decoding replayed on one of the target's own answers (teacher-forced features): the acceptance
    lengths (from the response start, each step accepts the drafts that equal the answer, plus one token), and
    the first draft's logits (S - 1 - response_start, V') at every anchor. `head` (V', H) are the LM-head rows the
    drafter drafts from, `vocab_ids` (V',) their token ids (None: all)."""
    features = target_out.features
    tokens = seq.tokens.to(features.device)
    anchors = torch.arange(seq.response_start, len(tokens) - 1, device=features.device)
    drafts = draft_matches(drafter, embed, head, vocab_ids, features, tokens, anchors, block_size)
    matched_at = drafts.matched.tolist()  # one device->host copy, not one per step
    return walk(seq.response_start, len(tokens), lambda p: matched_at[p - seq.response_start]), drafts.first


def first_draft_acceptance(
    first_logits: torch.Tensor, target_out: TargetPass, seq, vocab_map: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chance (per response token, teacher-forced) that the first draft of a block is accepted at T=1:
    sum_x min(p, q) when drafts are sampled from the drafter's q (`draft_sampling=True`), and p(argmax q) for
    the default argmax drafts. Both count only the target's top-k tokens, so they are lower bounds.
    `first_logits` come from `replay`; `vocab_map` maps token ids to drafter rows (-100: not draftable)."""
    targets = torch.arange(seq.response_start + 1, len(seq.tokens), device=first_logits.device)
    q = torch.softmax(first_logits, dim=-1)  # (a, V')
    p, ids = target_out.top_logprobs[targets].exp(), target_out.top_ids[targets].long()  # (a, k)
    if vocab_map is not None:
        ids = vocab_map[ids]
    q_at = q.gather(-1, ids.clamp_min(0)) * (ids >= 0)  # (a, k): q of the target's likeliest tokens
    sampled = torch.minimum(p, q_at).sum(-1)
    argmax = (p * (ids == q.argmax(-1, keepdim=True))).sum(-1)
    return sampled, argmax


def validation_taus(
    drafter,
    embed,
    head,
    vocab_ids,
    vocab_map,
    cache: FeatureCache,
    val_by_source: dict[str, list],
    sizes,
    per_size: int,
) -> dict[str, float]:
    """`val_tau_b{size}` over every greedy validation answer for each size, `val_tau_b{per_size}/{source}` per data
    source (on a `sampled-` source: the tau of sampled decoding), and the first draft's acceptance at T=1 on the
    greedy answers at `per_size` (`val_accept1_t1/sampled`, `val_accept1_t1/argmax`): one replay per answer and
    size, one cache read per answer."""
    lengths: dict[int, dict[str, list[int]]] = {size: {} for size in sorted(set(sizes))}
    greedy: dict[int, list[int]] = {size: [] for size in lengths}  # the overall tau pools greedy answers only
    accepted: list[tuple[torch.Tensor, torch.Tensor]] = []
    for source, seqs in val_by_source.items():
        for seq in seqs:
            target_out = cache.get(seq.id, seq.tokens[None])
            for size, by_source in lengths.items():
                steps, first_logits = replay(drafter, embed, head, vocab_ids, target_out, seq, size)
                by_source.setdefault(source, []).extend(steps)
                if seq.kind == "greedy":
                    greedy[size].extend(steps)
                    if size == per_size:
                        accepted.append(first_draft_acceptance(first_logits, target_out, seq, vocab_map))
    record = {}
    for size, by_source in lengths.items():
        if greedy[size]:
            record[f"val_tau_b{size}"] = mean_acceptance_length(greedy[size])
        if size == per_size:
            record.update({f"val_tau_b{size}/{s}": mean_acceptance_length(n) for s, n in by_source.items()})
    if accepted:
        record["val_accept1_t1/sampled"] = float(torch.cat([s for s, _ in accepted]).mean())
        record["val_accept1_t1/argmax"] = float(torch.cat([a for _, a in accepted]).mean())
    return record


def frequent_tokens(sequences: list[TrainingSequence], n: int, vocab: int) -> torch.Tensor:
    counts = torch.zeros(vocab, dtype=torch.long)
    for s in sequences:
        counts += torch.bincount(s.tokens[s.response_start :], minlength=vocab)
    return counts.argsort(descending=True)[:n].sort().values


def train_drafter(cfg: DrafterTrainingConfig, accelerator, target=None) -> Path:
    """Train (or resume) a drafter for `cfg.target` (or the given `target` model); returns the final folder."""
    from ...embedded import load_target

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    if target is None:
        target, _ = load_target(cfg.target)
    target.requires_grad_(False)
    target.to(accelerator.device)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()

    # 1. Data: the target's own answers, split by id hash into train / validation.
    train, val_by_source = validation_split(load_sequences(cfg.data), cfg.val_percent, cfg.val_sequences)
    val = [seq for seqs in val_by_source.values() for seq in seqs]
    (out / "trained_on.json").write_text(json.dumps(data_summary(train, val), indent=1))
    tokens = sum(len(s.tokens) - s.response_start for s in train)
    logger.info("%d training sequences (%d response tokens), %d validation", len(train), tokens, len(val))
    cache = FeatureCache(out / "features", target, [], autocast=accelerator.autocast)

    # 2. Model, optimiser, schedule.
    drafter = make_drafter(cfg, target)
    cache.layer_ids = drafter.config.target_layer_ids
    vocab = embed.weight.shape[0]
    vocab_map, keep = None, None
    if cfg.loss_vocab_size:
        keep = frequent_tokens(train, cfg.loss_vocab_size, vocab).to(accelerator.device)
        vocab_map = torch.full((vocab,), -100, dtype=torch.long, device=accelerator.device)
        vocab_map[keep] = torch.arange(len(keep), device=accelerator.device)
    head = lm_head.weight if keep is None else lm_head.weight[keep]  # (V', H): the rows drafts come from
    total_steps = max(1, math.ceil(cfg.epochs * len(train) / cfg.sequences_per_step))
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.95))
    # Linear warmup, then cosine decay to 0; its state is checkpointed with the rest (accelerate `save_state`).
    schedule = get_cosine_schedule_with_warmup(optimizer, max(1, int(cfg.warmup * total_steps)), total_steps)
    drafter, optimizer, schedule = accelerator.prepare(drafter, optimizer, schedule)
    state = _resume(accelerator, out, cfg.init_from)
    _check_same_data(state, train)
    if state.pop(
        "continued", False
    ):  # committed weights of an earlier run: its schedule and data order go on from there
        for _ in range(state["step"]):
            schedule.step()
    weights = decay_weights(cfg.block_size, cfg.gamma).to(accelerator.device)

    # 3. Loop: one optimizer step per `sequences_per_step` sequences, each sequence one packed forward.
    generator = torch.Generator().manual_seed(cfg.seed + state["step"])
    # Wall clock (it counts pauses) and this process's CPU time (all its threads), both cumulative over resumes.
    start_time, elapsed_before = time.time(), state["elapsed"]
    start_cpu, cpu_before = time.process_time(), state.get("cpu_seconds", 0.0)
    bar = tqdm(total=total_steps, initial=state["step"], desc="train-drafter", disable=not accelerator.is_main_process)
    metrics = JsonlWriter(out / METRICS_NAME)  # steps redone after a resume are appended again; the last one wins

    def validate() -> dict[str, float]:
        drafter.eval()
        model = accelerator.unwrap_model(drafter)
        sizes = (4, 8, cfg.block_size)
        return validation_taus(model, embed, head, keep, vocab_map, cache, val_by_source, sizes, cfg.block_size)

    if state["step"] == 0 and cfg.init_from:  # the warm start's own tau, so the curve shows what training added
        record = {"step": 0, "minutes": 0.0, "sequences_seen": 0, **validate()}
        if accelerator.is_main_process:
            metrics.append(record)
    while state["step"] < total_steps:
        step = state["step"]
        drafter.train()
        losses, accs = [], []
        for j in range(cfg.sequences_per_step):
            idx = (step * cfg.sequences_per_step + j) * accelerator.num_processes + accelerator.process_index
            epoch, position = divmod(idx, len(train))
            seq = train[visit_order(len(train), cfg.seed, epoch)[position]]
            with accelerator.autocast():
                loss, acc = sequence_loss(
                    drafter, embed, head, cache.get(seq.id, seq.tokens[None]), seq, cfg, weights, vocab_map, generator
                )
            accelerator.backward(loss / cfg.sequences_per_step)
            losses.append(loss.item())
            accs.append(acc)
        accelerator.clip_grad_norm_(drafter.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        state["step"] += 1
        elapsed = elapsed_before + time.time() - start_time
        cpu_seconds = cpu_before + time.process_time() - start_cpu
        record = {
            "step": state["step"],
            "loss": sum(losses) / len(losses),
            "acc1": sum(accs) / len(accs),
            "lr": schedule.get_last_lr()[0],
            "minutes": elapsed / 60,
            "cpu_hours": cpu_seconds / 3600,
            "sequences_seen": state["step"] * cfg.sequences_per_step,
        }
        out_of_time = cfg.max_minutes and elapsed > cfg.max_minutes * 60
        if state["step"] % cfg.val_every == 0 or state["step"] == total_steps or out_of_time:
            record.update(validate())  # the last step of every run is validated, also one stopped by the clock
        bar.update(1)
        bar.set_postfix(loss=f"{record['loss']:.3f}", acc1=f"{record['acc1']:.2f}")
        if accelerator.is_main_process:
            metrics.append(record)
        if state["step"] % cfg.save_every == 0 or state["step"] == total_steps or out_of_time:
            state.update(elapsed=elapsed, cpu_seconds=cpu_seconds)
            _checkpoint(accelerator, out, state)
            if accelerator.is_main_process:  # loadable as it stands: replay it, warm-start from it, or ship it
                save_drafter(accelerator.unwrap_model(drafter), out / "checkpoint" / "drafter", keep, cfg)
        if out_of_time:
            logger.warning("Stopping after %.1f minutes (max_minutes); rerun the same command to resume.", elapsed / 60)
            break
    bar.close()
    final = out / "drafter"
    if accelerator.is_main_process:
        saved = save_drafter(accelerator.unwrap_model(drafter), final, keep, cfg)
        write_training_card(saved, final, cfg, train, out / METRICS_NAME, device_name(accelerator.device))
    return final


def save_drafter(model: DFlashDrafter, folder: Path, keep: torch.Tensor | None, cfg: DrafterTrainingConfig):
    """Save a copy of `model` to `folder` as a drafter `from_pretrained` loads: weights in `cfg.save_dtype`,
    drafting from `keep` (the loss vocabulary; None: all of it), with the config that trained it. The model in
    training is left untouched. Returns the saved copy."""
    saved = copy.deepcopy(model)
    saved.set_draft_vocab(keep)
    saved.to(getattr(torch, cfg.save_dtype)).save_pretrained(folder)
    (folder / "training_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    return saved


@functools.lru_cache(maxsize=2)
def visit_order(count: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The order epoch `epoch` reads the `count` training sequences in: a new shuffle each epoch, so no two epochs
    feed the same sequences to the same steps, and the same one on every resume (epoch 0 reads in seed order)."""
    generator = torch.Generator().manual_seed(seed + 7919 * epoch)
    return tuple(torch.randperm(count, generator=generator).tolist())


def data_summary(train: list[TrainingSequence], val: list[TrainingSequence]) -> dict:
    """What trained the drafter: sequences and response tokens per source, and every id (train and validation)."""
    per_source: dict[str, dict[str, int]] = {}
    for seq in train:
        entry = per_source.setdefault(seq.source, {"sequences": 0, "response_tokens": 0})
        entry["sequences"] += 1
        entry["response_tokens"] += len(seq.tokens) - seq.response_start
    return {
        "response_tokens": sum(e["response_tokens"] for e in per_source.values()),
        "per_source": dict(sorted(per_source.items())),
        "train_ids": [s.id for s in train],
        "val_ids": [s.id for s in val],
    }


def write_training_card(
    drafter,
    folder: Path,
    cfg: DrafterTrainingConfig,
    train: list[TrainingSequence],
    metrics_path: Path,
    machine: str,
) -> None:
    """The drafter's model card: data per source, steps, time, and the last validation tau per size and source."""
    from ...drafter.card import write_drafter_card
    from .curves import plot_training_curves, read_metrics

    metrics = read_metrics(metrics_path)
    plot_training_curves(metrics_path, folder / "training_curve.png")
    last = metrics[-1]
    validated = next((m for m in reversed(metrics) if "val_tau_b4" in m), {})
    tau = {k: v for k, v in validated.items() if "val_tau" in k}
    summary = data_summary(train, [])
    per_source = ", ".join(f"{name} {e['response_tokens']:,}" for name, e in summary["per_source"].items())
    training = (
        f"- Data: {len(train)} sequences, {summary['response_tokens']:,} response tokens ({per_source}): the "
        "target's own answers, greedy (sampled ones under `sampled-` sources; text rows, if any, are offline text "
        "labelled by the target's predictions). "
        "Ids and per-source counts are in `trained_on.json`; no evaluation- or policy-split prompt was used.\n"
        f"- Recipe: `blockpilot train-drafter` with the config in `training_config.json` "
        f"({cfg.num_layers} layers, block {cfg.block_size}, gamma {cfg.gamma}, {cfg.anchors_per_sequence} anchors per "
        f"sequence, lr {cfg.lr}, loss vocabulary {cfg.loss_vocab_size or 'full'}, soft-label weight {cfg.distill_weight}"
        f"{f', warm start from {cfg.init_from}' if cfg.init_from else ''})\n"
        f"- {last['step']} optimizer steps of {cfg.sequences_per_step} sequences in {last['minutes']:.0f} minutes on "
        f"{machine}; final loss {last['loss']:.3f}, first-position accuracy {last['acc1']:.2f}"
    )
    rows = []
    for key, value in tau.items():
        size, _, source = key.removeprefix("val_tau_b").partition("/")
        rows.append(f"| {size} | {source or 'all'} | {value:.3f} |")
    table = "\n".join(
        [
            "| block size | data | validation tau (held-out answers, teacher-forced; sampled-*: sampled ones) |",
            "|---|---|---|",
        ]
        + rows
    )
    if "val_accept1_t1/sampled" in validated:
        table += (
            f"\n\nAt T=1 the first draft of a block is accepted with probability at least "
            f"{validated['val_accept1_t1/sampled']:.3f} with `draft_sampling=True` and "
            f"{validated['val_accept1_t1/argmax']:.3f} with argmax drafts (teacher-forced validation)."
        )
    results = {k.replace("val_", "validation "): v for k, v in tau.items() if "/" not in k}
    write_drafter_card(
        drafter, folder, training, results, table + "\n\n![training curve](training_curve.png)", cfg.target
    )


def _check_same_data(state: dict, train: list[TrainingSequence]) -> None:
    """Record the training sequences' fingerprint in a new run's state; refuse to resume one whose `--data` now
    holds other sequences, which would silently change what every later step visits (e.g. a data file that grew)."""
    digest = hashlib.sha256("".join(f"{s.id}\t{s.kind}\t{len(s.tokens)}\n" for s in train).encode()).hexdigest()[:16]
    if state.setdefault("data", digest) != digest:
        raise ValueError(
            f"--data holds other training sequences than when this run started ({len(train)} now; fingerprint "
            f"{digest}, the run's {state['data']}). Resume with the same files as then, or start a new run from "
            "this one's weights: a new --out with --init-from <out>/checkpoint/drafter."
        )


def _checkpoint(accelerator, out: Path, state: dict) -> None:
    accelerator.save_state(str(out / "checkpoint"))
    if accelerator.is_main_process:
        (out / "checkpoint" / "progress.json").write_text(json.dumps(state))


def _resume(accelerator, out: Path, init_from: str | None) -> dict:
    """Where training starts: the run's own checkpoint in `out` (weights, optimizer, schedule), else a committed
    run folder given as `init_from` (weights, step count and metrics; the optimizer's moments start afresh), else
    step 0."""
    progress = out / "checkpoint" / "progress.json"
    if progress.exists():
        accelerator.load_state(str(out / "checkpoint"))
        state = json.loads(progress.read_text())
        logger.warning("Resuming drafter training at step %d", state["step"])
        return state
    committed = Path(init_from or "") / "progress.json"
    if init_from and committed.exists():
        state = json.loads(committed.read_text())
        if not (out / METRICS_NAME).exists() and (committed.parent / METRICS_NAME).exists():
            shutil.copy(committed.parent / METRICS_NAME, out / METRICS_NAME)  # one curve across machines
        logger.warning("Continuing %s at step %d with a fresh optimizer state", init_from, state["step"])
        return {**state, "continued": True}
    return {"step": 0, "elapsed": 0.0, "cpu_seconds": 0.0}
