"""The drafter recipe: packed training blocks see exactly what decoding shows the drafter, and training works."""

from __future__ import annotations

import json

import pytest
import torch
from accelerate import Accelerator
from transformers import DynamicCache

from blockpilot_hf import DFlashDrafter
from blockpilot_hf.data import is_heldout
from blockpilot_hf.testing_utils import (
    MASK_ID,
    random_prompt,
    target_answers_file,
    tiny_drafter,
    tiny_target,
    tiny_training_config,
)
from blockpilot_hf.training.drafter.blocks import build_blocks, decay_weights, sample_anchors
from blockpilot_hf.training.drafter.recipe import (
    DrafterTrainingConfig,
    data_summary,
    load_sequences,
    make_drafter,
    soft_label_loss,
    train_drafter,
    validation_split,
    validation_taus,
    visit_order,
)
from blockpilot_hf.training.drafter.target_features import FeatureCache, target_pass


def test_block_mask_hides_the_future_and_other_blocks():
    tokens = torch.arange(10, 22)
    batch = build_blocks(tokens, tokens, torch.tensor([3, 7]), 4, MASK_ID, response_start=2)
    S = len(tokens)
    ctx = batch.attention_mask[:, 0, :, :S]  # (A, K, S)
    assert ctx[0].all(dim=0).tolist() == [True] * 3 + [False] * 9  # block at p=3 sees positions 0..2
    assert ctx[1].all(dim=0).tolist() == [True] * 7 + [False] * 5
    assert batch.attention_mask[:, 0, :, S:].all()  # every key of its own block
    assert batch.block_ids.tolist() == [[13, MASK_ID, MASK_ID, MASK_ID], [17, MASK_ID, MASK_ID, MASK_ID]]
    assert batch.labels.tolist() == [[14, 15, 16], [18, 19, 20]]
    assert batch.position_ids[1, S:].tolist() == [7, 8, 9, 10]


def test_labels_past_the_end_or_before_the_response_are_ignored():
    tokens = torch.arange(6)
    batch = build_blocks(tokens, tokens, torch.tensor([1, 4]), 4, MASK_ID, response_start=3)
    assert batch.labels.tolist() == [[-100, 3, 4], [5, -100, -100]]


def test_anchor_sampling_and_weights():
    g = torch.Generator().manual_seed(0)
    anchors = sample_anchors(response_start=10, length=50, max_anchors=8, generator=g)
    assert len(anchors) == 8 and anchors.min() >= 9 and anchors.max() <= 48 and (anchors.diff() > 0).all()
    w = decay_weights(8, gamma=4.0)
    assert torch.isclose(w.sum(), torch.tensor(1.0)) and (w.diff() < 0).all()


def test_packed_training_forward_equals_decoding_drafts():
    """Block a in the packed forward gives the same hidden states as `drafter.draft` at that anchor."""
    target = tiny_target()
    drafter = tiny_drafter(target, block_size=4)
    tokens = random_prompt(3, 14)[0]
    features = target_pass(target, tokens[None], drafter.config.target_layer_ids).features
    anchors = torch.tensor([5, 9])
    batch = build_blocks(tokens, tokens, anchors, 4, MASK_ID, response_start=1)
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    with torch.no_grad():
        packed = drafter(
            embed(batch.block_ids), features[None], position_ids=batch.position_ids, attention_mask=batch.attention_mask
        ).last_hidden_state
    for a, p in enumerate(anchors.tolist()):
        cache = DynamicCache(config=drafter.config)
        logits = drafter.draft(embed, head, tokens[p].view(1, 1), features[None, :p], 4, cache)
        torch.testing.assert_close(head(packed[a, 1:]), logits[0])


def test_every_epoch_reads_every_sequence_once_in_its_own_order():
    epochs = [visit_order(50, seed=3, epoch=e) for e in range(3)]
    assert all(sorted(order) == list(range(50)) for order in epochs)
    assert len(set(epochs)) == 3  # reshuffled each epoch
    assert visit_order.__wrapped__(50, 3, 1) == epochs[1]  # the same order again after a resume


@pytest.mark.parametrize("loss_vocab_size", [0, 32])
def test_training_lowers_the_loss_checkpoints_and_resumes(tmp_path, loss_vocab_size):
    target = tiny_target(dtype=torch.float32)
    data = target_answers_file(tmp_path, target)
    cfg = tiny_training_config(
        data,
        tmp_path / "run",
        gamma=2.0,
        anchors_per_sequence=8,
        lr=3e-3,
        epochs=24,
        val_percent=20,
        val_every=10,
        save_every=5,
        loss_vocab_size=loss_vocab_size,
    )
    final = train_drafter(cfg, Accelerator(cpu=True), target=target)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    first, last = (sum(m["loss"] for m in part) / len(part) for part in (metrics[:5], metrics[-5:]))
    assert last < 0.8 * first
    assert any("val_tau_b4" in m for m in metrics)
    validated = next(m for m in metrics if "val_tau_b4" in m)
    assert validated["val_tau_b4/t"] == validated["val_tau_b4"]  # one source: its tau is the overall one
    drafter = DFlashDrafter.from_pretrained(final)
    assert drafter.config.block_size == 4 and drafter.config.mask_token_id == MASK_ID
    # The last checkpoint holds the same drafter, loadable as a folder of its own.
    checkpointed = DFlashDrafter.from_pretrained(tmp_path / "run" / "checkpoint" / "drafter").state_dict()
    assert checkpointed.keys() == drafter.state_dict().keys()
    assert all(torch.equal(checkpointed[name], weight) for name, weight in drafter.state_dict().items())
    assert (tmp_path / "run" / "checkpoint" / "drafter" / "training_config.json").is_file()
    steps = len(metrics)
    # A rerun finds the finished checkpoint and does no more steps.
    train_drafter(cfg, Accelerator(cpu=True), target=target)
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == steps


def test_soft_label_loss_is_cross_entropy_to_the_renormalised_top_k():
    logprobs = torch.log_softmax(torch.randn(2, 3, 10), dim=-1)
    top_logprobs, top_ids = torch.log_softmax(torch.randn(2, 3, 10), dim=-1).topk(4, dim=-1)
    p = torch.softmax(top_logprobs, dim=-1)  # the top 4 renormalised
    want = -(p * logprobs.gather(-1, top_ids)).sum(-1)
    torch.testing.assert_close(soft_label_loss(logprobs, top_logprobs, top_ids, None), want)


def test_soft_label_loss_drops_tokens_the_drafter_cannot_draft():
    """With a reduced drafting vocabulary, the target's mass on other tokens is dropped, the rest renormalised."""
    vocab_map = torch.tensor([-100, 0, 1, -100, 2])  # token -> drafter row; tokens 0 and 3 are not draftable
    logprobs = torch.log_softmax(torch.randn(1, 1, 3), dim=-1)
    top_ids = torch.tensor([[[3, 1, 4]]])
    top_logprobs = torch.log(torch.tensor([[[0.5, 0.3, 0.1]]]))
    want = -(0.75 * logprobs[0, 0, 0] + 0.25 * logprobs[0, 0, 2])
    torch.testing.assert_close(soft_label_loss(logprobs, top_logprobs, top_ids, vocab_map)[0, 0], want)
    none_draftable = soft_label_loss(logprobs, top_logprobs, torch.tensor([[[0, 3, 0]]]), vocab_map)
    assert none_draftable.item() == 0  # no label left: no loss, and no NaN


def test_distillation_teaches_the_drafter_to_sample_like_the_target(tmp_path):
    """Soft labels only (distill_weight=1): the first draft's T=1 acceptance with sampled drafts rises above
    the untrained drafter's (step 0 of a warm start), and stays a probability."""
    target = tiny_target(dtype=torch.float32)
    tiny_drafter(target, seed=7, block_size=4, mask_token_id=MASK_ID).save_pretrained(tmp_path / "start")
    data = target_answers_file(tmp_path, target, n=10)
    cfg = tiny_training_config(
        data,
        tmp_path / "run",
        init_from=str(tmp_path / "start"),
        anchors_per_sequence=16,
        lr=3e-3,
        epochs=12,
        val_percent=30,
        distill_weight=1.0,
    )
    train_drafter(cfg, Accelerator(cpu=True), target=target)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    before, after = metrics[0], metrics[-1]
    assert 0 <= before["val_accept1_t1/sampled"] < after["val_accept1_t1/sampled"] <= 1
    assert 0 <= after["val_accept1_t1/argmax"] <= 1


def test_an_interrupted_run_resumes_its_learning_rate_schedule(tmp_path):
    """Warmup then cosine decay to 0; a run stopped by `max_minutes` continues the schedule where it stopped
    (its state is checkpointed), so the learning rates equal those of an uninterrupted run."""
    from transformers import get_cosine_schedule_with_warmup

    target = tiny_target(dtype=torch.float32)
    data = target_answers_file(tmp_path, target, n=4)
    cfg = tiny_training_config(
        data,
        tmp_path / "run",
        anchors_per_sequence=4,
        epochs=6,
        warmup=0.25,
        save_every=1000,
        max_minutes=1e-9,  # stop (with a checkpoint) after the first step
    )
    train_drafter(cfg, Accelerator(cpu=True), target=target)
    metrics_path = tmp_path / "run" / "metrics.jsonl"
    assert [json.loads(line)["step"] for line in metrics_path.read_text().splitlines()] == [1]
    cfg.max_minutes = 0.0
    train_drafter(cfg, Accelerator(cpu=True), target=target)
    lrs = [json.loads(line)["lr"] for line in metrics_path.read_text().splitlines()]
    total = len(lrs)
    assert total == 12  # 6 epochs x 4 sequences / 2 per step
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    schedule = get_cosine_schedule_with_warmup(optimizer, 3, total)
    expected = []
    for _ in range(total):
        optimizer.step()
        schedule.step()
        expected.append(schedule.get_last_lr()[0])
    assert lrs == pytest.approx(expected) and lrs[-1] == 0.0 and max(lrs) == pytest.approx(cfg.lr)


def test_a_run_refuses_to_resume_on_other_data(tmp_path):
    """A data file that grew between sessions would silently change every later step's sequences: resuming
    with other data stops with an error that says how to go on, while the same data resumes (test above)."""
    target = tiny_target(dtype=torch.float32)
    data = target_answers_file(tmp_path, target, n=4)
    cfg = tiny_training_config(data, tmp_path / "run", anchors_per_sequence=4, epochs=2, max_minutes=1e-9)
    train_drafter(cfg, Accelerator(cpu=True), target=target)
    assert "data" in json.loads((tmp_path / "run" / "checkpoint" / "progress.json").read_text())
    target_answers_file(tmp_path, target, n=5)  # the same file, one row longer
    cfg.max_minutes = 0.0
    with pytest.raises(ValueError, match=r"other training sequences .*--init-from <out>/checkpoint/drafter"):
        train_drafter(cfg, Accelerator(cpu=True), target=target)


def test_a_committed_run_folder_continues_on_a_new_machine(tmp_path, monkeypatch):
    """What a session commits (the checkpoint's drafter, progress.json, metrics.jsonl), given as --init-from to
    a fresh out folder: training goes on at the committed step, with the learning-rate schedule where it was, one
    curve, and CPU time that adds up across the two machines."""
    import itertools
    import shutil
    import time

    clock = itertools.count()  # a CPU clock that advances one second per reading: one reading per step
    monkeypatch.setattr(time, "process_time", lambda: float(next(clock)))

    from transformers import get_cosine_schedule_with_warmup

    target = tiny_target(dtype=torch.float32)
    data = target_answers_file(tmp_path, target, n=4)
    common = dict(anchors_per_sequence=4, epochs=6, warmup=0.25, save_every=1000)
    cfg = tiny_training_config(data, tmp_path / "run", max_minutes=1e-9, **common)  # stops after step 1
    train_drafter(cfg, Accelerator(cpu=True), target=target)
    committed = tmp_path / "committed"
    shutil.copytree(tmp_path / "run" / "checkpoint" / "drafter", committed)
    for name in ("checkpoint/progress.json", "metrics.jsonl"):
        shutil.copy(tmp_path / "run" / name, committed)
    fresh = tiny_training_config(data, tmp_path / "new-machine", init_from=str(committed), **common)
    train_drafter(fresh, Accelerator(cpu=True), target=target)
    rows = [json.loads(line) for line in (tmp_path / "new-machine" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 13))  # the committed step 1, then 2..12: one curve
    assert [round(r["cpu_hours"] * 3600) for r in rows] == list(range(1, 13))  # 1 s committed, then 1 s a step
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    schedule = get_cosine_schedule_with_warmup(optimizer, 3, 12)
    expected = []
    for _ in range(12):
        optimizer.step()
        schedule.step()
        expected.append(schedule.get_last_lr()[0])
    assert [r["lr"] for r in rows[1:]] == pytest.approx(expected[1:])  # not a restarted warmup


def test_warm_start_loads_the_given_drafter_and_refuses_another_shape(tmp_path):
    target = tiny_target(dtype=torch.float32)
    start = tiny_drafter(target, seed=7, block_size=4)
    start.save_pretrained(tmp_path / "start")
    cfg = DrafterTrainingConfig(init_from=str(tmp_path / "start"), num_layers=1, block_size=4)
    loaded = make_drafter(cfg, target)
    assert all(
        torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), start.state_dict().values(), strict=True)
    )
    with pytest.raises(ValueError, match="has block_size=4 but the config asks for 8; pass --block-size 4"):
        make_drafter(DrafterTrainingConfig(init_from=str(tmp_path / "start"), num_layers=1, block_size=8), target)


def test_a_deeper_warm_start_grows_the_drafter_and_drafts_exactly_as_it_did(tmp_path):
    """New layers start out adding nothing: the grown drafter's draft logits equal the original's bit for bit,
    while its new output projections still get gradients (so training can use them)."""
    from blockpilot_hf.training.replay import block_logits

    target = tiny_target(dtype=torch.float32)
    start = tiny_drafter(target, seed=7, block_size=4, layers=2)
    start.save_pretrained(tmp_path / "start")
    grown = make_drafter(DrafterTrainingConfig(init_from=str(tmp_path / "start"), num_layers=3, block_size=4), target)
    assert grown.config.num_hidden_layers == 3 and len(grown.layers) == 3
    tokens = random_prompt(2, 24)[0]
    features = target_pass(target, tokens[None], start.config.target_layer_ids).features
    embed, head = target.get_input_embeddings(), target.get_output_embeddings().weight
    anchors = torch.arange(4, 20)
    with torch.no_grad():
        before = block_logits(start, embed, head, features, tokens, anchors, 4)[0]
    after = block_logits(grown, embed, head, features, tokens, anchors, 4)[0]
    assert torch.equal(before, after) and before.abs().sum() > 0
    after.square().sum().backward()
    assert grown.layers[2].self_attn.o_proj.weight.grad.abs().sum() > 0
    assert grown.layers[2].mlp.down_proj.weight.grad.abs().sum() > 0
    grown.save_pretrained(tmp_path / "grown")  # its config stays consistent (one layer type per layer)
    assert DFlashDrafter.from_pretrained(tmp_path / "grown").config.num_hidden_layers == 3
    with pytest.raises(ValueError, match="has 2 layers but the config asks for 1; a warm start keeps or adds layers"):
        make_drafter(DrafterTrainingConfig(init_from=str(tmp_path / "start"), num_layers=1, block_size=4), target)


def test_a_warm_start_records_its_starting_tau_at_step_0(tmp_path):
    from blockpilot_hf.training.drafter.curves import plot_training_curves

    target = tiny_target(dtype=torch.float32)
    tiny_drafter(target, seed=7, block_size=4, mask_token_id=MASK_ID).save_pretrained(tmp_path / "start")
    cfg = tiny_training_config(
        target_answers_file(tmp_path, target),
        tmp_path / "run",
        init_from=str(tmp_path / "start"),
        anchors_per_sequence=4,
        epochs=1,
        sequences_per_step=4,
        val_percent=20,
    )
    train_drafter(cfg, Accelerator(cpu=True), target=target)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["step"] == 0 and "val_tau_b4" in metrics[0] and "loss" not in metrics[0]
    assert metrics[1]["step"] == 1 and "loss" in metrics[1]
    assert plot_training_curves(tmp_path / "run" / "metrics.jsonl", tmp_path / "curve.png").stat().st_size > 0


def test_validation_is_split_per_source_and_recorded_with_token_counts(tmp_path):
    target = tiny_target(dtype=torch.float32)
    data = target_answers_file(tmp_path, target, n=12)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    for i, row in enumerate(rows):  # two sources
        row["source"] = "math" if i % 2 else "chat"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train, val = validation_split(load_sequences([str(data)]), percent=50, per_source=1)
    assert set(val) == {"math", "chat"} and all(len(seqs) == 1 for seqs in val.values())
    held = {s.id for seqs in val.values() for s in seqs}
    assert not held & {s.id for s in train}
    summary = data_summary(train, [s for seqs in val.values() for s in seqs])
    assert summary["response_tokens"] == sum(e["response_tokens"] for e in summary["per_source"].values())
    assert summary["response_tokens"] == sum(len(r["response_ids"]) for r in rows if r["id"] in summary["train_ids"])


def test_sampled_answers_train_and_validate_apart_from_greedy_ones(tmp_path):
    """A prompt's greedy and sampled answers both load (same id, another kind), land on the same validation side,
    and sampled ones are measured under their own `sampled-` source, outside the overall (greedy) tau."""
    target = tiny_target(dtype=torch.float32)
    data = target_answers_file(tmp_path, target, n=12)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    sampled = [{**row, "response_ids": row["response_ids"][::-1], "kind": "sampled"} for row in rows]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows + sampled))
    sequences = load_sequences([str(data)])
    assert len(sequences) == 24 and {s.source for s in sequences} == {"t", "sampled-t"}
    train, val = validation_split(sequences, percent=50, per_source=12)
    assert {s.id for s in val["t"]} == {s.id for s in val["sampled-t"]}
    assert {s.id for s in train if s.kind == "greedy"} == {s.id for s in train if s.kind == "sampled"}
    drafter = tiny_drafter(target, block_size=4)
    embed, head = target.get_input_embeddings(), target.get_output_embeddings().weight
    cache = FeatureCache(tmp_path / "features", target, drafter.config.target_layer_ids)
    both = validation_taus(drafter, embed, head, None, None, cache, val, (4,), 4)
    greedy_only = validation_taus(drafter, embed, head, None, None, cache, {"t": val["t"]}, (4,), 4)
    assert both["val_tau_b4"] == greedy_only["val_tau_b4"] == both["val_tau_b4/t"]
    assert "val_tau_b4/sampled-t" in both and "val_tau_b4/sampled-t" not in greedy_only


def test_every_turn_of_a_chat_lands_on_the_validation_side_of_its_first_turn():
    chats = [f"self-instruct/writing/0/{i}" for i in range(200)]
    held = [c for c in chats if is_heldout(c, 0.1)]
    assert 0 < len(held) < len(chats)  # the split holds some chats out, not all
    for chat in chats:  # with a hash of the row id alone, some second turns land apart from their first
        assert is_heldout(f"{chat}/turn2", 0.1) == is_heldout(chat, 0.1)


@pytest.mark.parametrize(
    ("cuda", "cuda_bf16", "cpu_bf16", "expected"),
    [(True, True, False, "bf16"), (True, False, True, "no"), (False, False, True, "bf16"), (False, False, False, "no")],
)
def test_auto_mixed_precision_takes_bf16_only_where_the_device_computes_it(
    monkeypatch, cuda, cuda_bf16, cpu_bf16, expected
):
    from blockpilot_hf.training.drafter.cli import resolve_mixed_precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: cuda_bf16)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: cpu_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert resolve_mixed_precision("auto") == expected
    assert resolve_mixed_precision("fp16") == "fp16"
