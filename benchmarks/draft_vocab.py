"""Copies of a trained drafter that draft from a larger vocabulary, to replay with `drafter_tau.py`: does the
8,192-id draft vocabulary cap tau, or the tokens outside it being hard anyway?

    python benchmarks/draft_vocab.py --drafter embedded --sizes 16384,0 --out runs/draft-vocab
    python benchmarks/drafter_tau.py --drafters embedded,runs/draft-vocab/v16384,runs/draft-vocab/full \\
        --split policy --answers training_data/smollm2-135m/policy-answers-t0.jsonl --out vocab-t0.json

A drafter's body does not depend on its draft vocabulary: its head reads the target's LM-head rows of the ids in
`draft_vocab_ids`. So a copy can draft from the N most frequent response tokens of the data the drafter was trained
on (its `training_config.json` names the files) or from the whole vocabulary (size 0) with no training; the weights
are the same, only the rows its argmax ranges over change.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from blockpilot_hf.drafter import DFlashDrafter
from blockpilot_hf.embedded import resolve_drafter
from blockpilot_hf.training.drafter.recipe import (
    DrafterTrainingConfig,
    frequent_tokens,
    load_sequences,
    validation_split,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafter", default="embedded", help="drafter folder; 'embedded' = the shipped one")
    parser.add_argument("--sizes", default="16384,0", help="draft vocabulary sizes to write (0 = the full vocabulary)")
    parser.add_argument("--out", default="runs/draft-vocab", help="folder for the copies (v<N>/ and full/)")
    args = parser.parse_args()
    folder = resolve_drafter(args.drafter)
    drafter = DFlashDrafter.from_pretrained(folder)
    cfg = DrafterTrainingConfig(**json.loads((folder / "training_config.json").read_text()))
    train, _ = validation_split(load_sequences(cfg.data), cfg.val_percent, cfg.val_sequences)
    vocab = drafter.config.vocab_size
    for size in map(int, args.sizes.split(",")):
        drafter.set_draft_vocab(frequent_tokens(train, size, vocab) if size else None)
        out = Path(args.out) / (f"v{size}" if size else "full")
        drafter.save_pretrained(out)
        print(f"wrote {out} (draft vocabulary: {size or vocab} ids)")


if __name__ == "__main__":
    main()
