"""blockpilot-hf as a transformers `custom_generate` recipe: lossless DFlash block speculative decoding.

    out = target.generate(**inputs, assistant_model=drafter, block_size=8,
                          custom_generate="blockpilot/dflash-generate", trust_remote_code=True)

transformers calls `generate(model=target, **every_generate_argument)` with the arguments unprepared. Calling
`model.generate` here would come straight back to this function, so the call goes to transformers' own
`GenerationMixin.generate`, through the same router that `blockpilot_hf.enable(model)` installs.
"""

import functools

from transformers import GenerationMixin

from blockpilot_hf.generation import generate_with_drafter


def generate(model, *args, **kwargs):
    """Generate with `model`; a `DFlashDrafter` passed as `assistant_model` runs blockpilot's engine (every
    argument `blockpilot_hf.enable` adds is accepted), anything else is plain `generate`."""
    return generate_with_drafter(functools.partial(GenerationMixin.generate, model), *args, **kwargs)
