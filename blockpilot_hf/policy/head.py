"""`BlockPolicy`: a small head that predicts the acceptance length of every candidate block size from prefill
features, and picks the size with the highest expected tokens per second (or, optionally, the highest tau).

    policy = BlockPolicy.from_pretrained("org/my-policy")          # folder or Hub id (offline from the cache)
    out = target.generate(**inputs, assistant_model=drafter, block_policy=policy)

Architecture (shapes for one prompt): feature rows (G, H) -> parameter-free layer norm -> one shared
Linear(H, r) -> (G*r) concatenated with standardised logit stats (S) -> MLP -> (C) outputs, one per candidate
candidate c (a block size b, or a tree / lookup `DraftShape`), mapped to tau(c) = 1 + (m - 1) * sigmoid(out)
where m is the most tokens one step of c can commit (b for a chain), so that 1 <= tau(c) <= m and tau(1) = 1.

Sampling accepts fewer drafts than greedy decoding, and copied (prompt-lookup) drafts far fewer, so the best
candidate depends on the temperature. A policy holds one such head per temperature it was trained at
(`config.temperatures`) and answers a request with the head nearest to the request's temperature.
"""

from __future__ import annotations

import copy
import itertools
import logging
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..constants import CARD_NAME, POLICY_CONFIG_NAME, POLICY_WEIGHTS_NAME
from ..decoding.engine import Prefill
from ..decoding.planner import StepPrior
from ..decoding.shape import DraftShape
from .config import BlockPolicyConfig, CostModel
from .cost import choose_size
from .features import PrefillFeatures, extract_features

logger = logging.getLogger(__name__)


class TauHead(nn.Module):
    """The tau predictor of one temperature: feature rows and logit stats -> predicted tau per candidate."""

    def __init__(self, config: BlockPolicyConfig):
        super().__init__()
        spec = config.features
        self.project = nn.Linear(spec.hidden_size, config.projection_dim)
        widths = [spec.num_groups * config.projection_dim + spec.num_stats, *config.hidden_sizes]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            layers += [nn.Linear(a, b), nn.GELU()]
        layers.append(nn.Linear(widths[-1], len(config.candidates)))
        self.mlp = nn.Sequential(*layers)
        # Standardisation of the logit stats, fitted on the training prompts (saved with the weights).
        self.register_buffer("stats_mean", torch.zeros(spec.num_stats))
        self.register_buffer("stats_std", torch.ones(spec.num_stats))

    def forward(self, groups: torch.Tensor, stats: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """Predicted tau (N, C) from feature rows (N, G, H), logit stats (N, S) and each candidate's most
        tokens per step (C,)."""
        dtype = self.project.weight.dtype  # float32 unless the user cast the head
        rows = F.layer_norm(groups.to(dtype), groups.shape[-1:])  # (N, G, H): layers differ wildly in scale
        projected = self.project(rows).flatten(1)  # (N, G*r)
        scaled = (stats.to(dtype) - self.stats_mean) / self.stats_std  # (N, S)
        raw = self.mlp(torch.cat([projected, scaled], dim=-1))  # (N, C)
        return 1 + (sizes - 1) * torch.sigmoid(raw)


NO_POLICY_HINT = (
    " A policy exists only where someone made and published one: `blockpilot make-policy --target TARGET "
    "--drafter DRAFTER --out DIR` makes one for your pair (then pass block_policy=DIR), and `block_size=N` or "
    '`block_policy="per-step"` decode without one.'
)


class BlockPolicy(nn.Module):
    """A BlockPilot policy: one `TauHead` per trained temperature, and a `BlockChooser` for
    `generate(block_policy=...)`: callable on a Prefill, with a `name`."""

    def __init__(self, config: BlockPolicyConfig):
        super().__init__()
        self.config = config
        self.heads = nn.ModuleList(TauHead(config) for _ in config.temperatures)  # one per trained temperature
        # The most tokens a step of each candidate commits: the upper bound of its predicted tau.
        self.register_buffer("sizes", torch.tensor([c.max_tokens for c in config.candidates], dtype=torch.float32))

    # ---- prediction -------------------------------------------------------------------------------------------
    def head_index(self, temperature: float) -> int:
        """The head trained at the temperature nearest to `temperature` (0 = greedy); ties go to the lower one."""
        temps = self.config.temperatures
        return min(range(len(temps)), key=lambda i: (abs(temps[i] - temperature), temps[i]))

    def forward(self, groups: torch.Tensor, stats: torch.Tensor, temperature: float = 0.0) -> torch.Tensor:
        """Predicted tau per candidate (N, C) from feature rows (N, G, H) and logit stats (N, S), by the head for
        `temperature`."""
        return self.heads[self.head_index(temperature)](groups, stats, self.sizes)

    @torch.no_grad()
    def predict_tau(self, features: Prefill | PrefillFeatures, temperature: float = 0.0) -> list[float]:
        """Predicted acceptance length for each of `config.candidates`, from one request's prefill, when it
        decodes at `temperature`."""
        if isinstance(features, Prefill):
            features = extract_features(features, self.config.features)
        device = self.sizes.device
        return self(features.groups[None].to(device), features.stats[None].to(device), temperature)[0].tolist()

    @property
    def name(self) -> str:
        """The name `generate` reports in its stats (`out.blockpilot.policy`)."""
        return f"blockpilot:{self.config.name}"

    def usable_cost_model(self, cost: CostModel | None) -> CostModel | None:
        """`cost` (with the stored model's tree / lookup shapes added, see `CostModel.with_shapes_from`) if it covers
        every candidate, else None (with a warning): the stored model is then used."""
        if cost is not None:
            cost = cost.with_shapes_from(self.config.cost)
        if cost is not None and not cost.covers(self.config.candidates):
            logger.warning(
                "Calibration covers sizes %s and shapes %s, not all of %s: keeping the stored cost model.",
                cost.block_sizes,
                sorted(cost.shapes),
                [str(c) for c in self.config.candidates],
            )
            return None
        return cost

    def choose(
        self,
        prefill: Prefill | PrefillFeatures,
        rule: str | None = None,
        cost: CostModel | None = None,
        temperature: float = 0.0,
    ) -> int | DraftShape:
        """The block size (or, for a tree / lookup candidate, the `DraftShape`) for this request under `rule`
        (default: the config's choice rule), with `cost` (default: the stored `config.cost`) as the seconds per step, when it
        decodes at `temperature` (0 = greedy)."""
        best = choose_size(
            self.predict_tau(prefill, temperature),
            self.config.candidates,
            rule or self.config.choice,
            cost or self.config.cost,
        )
        return best.block_size if best.is_chain else best

    def choose_batch(
        self,
        prefills: list[Prefill | PrefillFeatures],
        rule: str | None = None,
        cost: CostModel | None = None,
        temperature: float = 0.0,
    ) -> int:
        """One block size for a batch of requests decoded together: argmax over block sizes b of the batch's
        predicted tokens per second, sum_r tau_r(b) / cost(B * b). A batched step verifies B rows of the widest
        block, which costs about what one row of B * b tokens does. Sizes whose B * b tokens lie beyond what the
        cost model measured are left out (a cost curve is not extrapolated: calibrate wider steps to allow them),
        and so are shapes (batches draft chains); size 1 always stays."""
        rule, cost, batch = rule or self.config.choice, cost or self.config.cost, len(prefills)
        priced = rule == "throughput" and cost is not None

        def allowed(c: DraftShape) -> bool:
            return c.is_chain and (c.block_size == 1 or not priced or cost.covers([batch * c.block_size]))

        usable = [i for i, c in enumerate(self.config.candidates) if allowed(c)]
        taus = [self.predict_tau(p, temperature) for p in prefills]
        totals = [sum(t[i] for t in taus) for i in usable]
        tokens = [self.config.candidates[i].block_size * batch for i in usable]  # verified by one batched step
        return choose_size(totals, tokens, rule, cost) // batch

    def step_prior(self, temperature: float = 0.0) -> StepPrior:
        """Per-step choice's prior for the head nearest `temperature`: fitted (`fit-step-prior`) or the default."""
        priors = self.config.step_priors
        return priors[self.head_index(temperature)] if priors else StepPrior()

    def with_decision(self, decision: str) -> BlockPolicy:
        """This policy (the same weights) deciding `decision`: "per-step" or "per-request" (see the config)."""
        other = copy.copy(self)
        other.config = replace(self.config, decision=decision)
        return other

    def __call__(self, *args, **kwargs):
        # A Prefill alone means "choose"; tensors mean the usual nn.Module forward.
        if len(args) == 1 and not kwargs and isinstance(args[0], Prefill):
            return self.choose(args[0])
        return super().__call__(*args, **kwargs)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ---- save / load / Hub ------------------------------------------------------------------------------------
    def save_pretrained(self, folder: str | Path, repo_id: str | None = None, card_details: str = "") -> Path:
        """Write config.json, model.safetensors and a README.md model card to `folder`. The card's Use snippet
        loads `repo_id` when given (the Hub repo the folder is pushed to); `card_details` is markdown appended to
        it (make-policy: the evaluation, plots and provenance)."""
        from safetensors.torch import save_file

        from ..cards import location_hint
        from .card import render_card

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.config.save(folder / POLICY_CONFIG_NAME)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(folder / POLICY_WEIGHTS_NAME), metadata={"format": "pt"})
        (folder / CARD_NAME).write_text(
            render_card(self.config, self.num_parameters(), location_hint(folder, repo_id), card_details),
            encoding="utf-8",
        )
        return folder

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, revision: str | None = None, device: str | None = None
    ) -> BlockPolicy:
        """Load from a folder or a Hub id (the HF cache is used, offline too); damaged files raise clear errors."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from ..hub import resolve_folder

        required = (POLICY_CONFIG_NAME, POLICY_WEIGHTS_NAME)
        folder = resolve_folder(name_or_path, "BlockPilot policy", required, revision, NO_POLICY_HINT)
        policy = cls(BlockPolicyConfig.load(folder / POLICY_CONFIG_NAME))
        try:
            state = load_file(str(folder / POLICY_WEIGHTS_NAME))
        except (SafetensorError, OSError) as err:
            raise OSError(
                f"{folder / POLICY_WEIGHTS_NAME} is not a readable safetensors file ({err}); re-download or re-save it."
            ) from err
        try:
            policy.load_state_dict(state)
        except RuntimeError as err:
            raise OSError(
                f"{folder} holds weights that do not fit its config.json ({err}); the folder is inconsistent."
            ) from err
        return policy.to(device or "cpu").eval()

    def push_to_hub(self, repo_id: str, private: bool = False, commit_message: str = "Upload BlockPilot policy") -> str:
        """Save to a temporary folder and upload it as model repo `repo_id`; returns the repo URL."""
        import tempfile

        from huggingface_hub import HfApi

        api = HfApi()
        url = api.create_repo(repo_id, private=private, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            self.save_pretrained(tmp, repo_id=repo_id)
            api.upload_folder(repo_id=repo_id, folder_path=tmp, commit_message=commit_message)
        return str(url)
