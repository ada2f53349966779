"""Turn the `block_size` / `block_policy` arguments of `generate` into a fixed `DraftShape` or a chooser.

`block_policy` may be an int, `"fixed:N"` (N a block size or a draft shape such as `8+tree16`), a policy folder, a
Hub id of one, a `BlockPolicy`, or any callable taking a `Prefill` and returning an int or a `DraftShape`. Whatever a
chooser returns is checked by `check_shape` before the engine uses it, so a policy can change speed but never
correctness.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from ..decoding.engine import BlockChooser, Prefill
from ..decoding.planner import StepCosts, StepPlanner
from ..decoding.shape import DraftShape
from ..validation import check_policy_compatible, check_policy_sizes, check_shape
from .config import CostModel
from .step import PerStepPolicy

PER_STEP = "per-step"  # block_policy that chooses every step with no head (a neutral prior)
# Relative costs for a device never calibrated, on the safe side for CPUs and GPUs alike: verifying n rows costs
# 1 + 0.05 (n - 1) plain steps up to 16 rows (no more are planned), a drafter pass 0.15 of one.
GENERIC_STEP_COSTS = StepCosts((1, 16), (1.0, 1.75), 0.15)

logger = logging.getLogger(__name__)


def resolve_block_policy(
    block_policy,
    block_size,
    drafter,
    target,
    draft_sampling: bool = False,
    temperature: float = 0.0,
    tree_budget: int | None = None,
    lookup_tokens: int = 0,
) -> DraftShape | BlockChooser:
    """Return a fixed `DraftShape` or a `BlockChooser` (whose answers are checked) for the engine.

    An int or `"fixed:N"` is a fixed block size, drafted with the call's `tree_budget` / `lookup_tokens`
    (`"fixed:8+tree16"` is a whole fixed shape); none of both means the drafter's training block size. A
    `BlockPolicy` is used as it is, never modified: this machine's calibration and the request's sampling
    `temperature` (0 = greedy; it picks the policy's head) travel with the returned chooser.
    """
    if block_policy is not None and block_size is not None:
        raise ValueError("Pass either `block_size` or `block_policy`, not both.")
    options = dict(tree_budget=tree_budget, lookup_tokens=lookup_tokens)

    def fixed(size: int | DraftShape) -> DraftShape:
        return with_call_options(check_shape(size, target, drafter, draft_sampling), **options)

    def checked(chooser: BlockChooser) -> CheckedChooser:
        return CheckedChooser(chooser, target, drafter, draft_sampling, **options)

    if block_policy is None or (isinstance(block_policy, int) and not isinstance(block_policy, bool)):
        size = block_policy if block_policy is not None else block_size
        return fixed(drafter.config.block_size if size is None else size)
    if block_policy == PER_STEP:
        return checked(PerStepPolicy(step_costs_for(target, drafter, None), drafter.config.block_size - 1))
    if isinstance(block_policy, str) and block_policy.startswith("fixed:"):
        try:
            shape = DraftShape.parse(block_policy.removeprefix("fixed:"))
        except ValueError as err:
            raise ValueError(
                f"block_policy {block_policy!r}: expected 'fixed:N' with an integer N, or a draft shape such as "
                f"'fixed:8+tree16' ({err})"
            ) from err
        return fixed(shape.block_size if shape.is_chain else shape)
    from .head import BlockPolicy

    if isinstance(block_policy, (str, os.PathLike)):
        block_policy = BlockPolicy.from_pretrained(block_policy)
    if isinstance(block_policy, BlockPolicy):
        return checked(_prepare_policy(block_policy, drafter, target, draft_sampling, temperature))
    if callable(block_policy):
        return checked(as_chooser(block_policy))
    raise ValueError(
        f"Unknown block_policy {block_policy!r} ({type(block_policy).__name__}): pass an int, 'fixed:N', 'per-step', "
        "a policy folder or Hub id, a BlockPolicy, or a callable taking a Prefill and returning an int or a DraftShape."
    )


@dataclass
class NamedChooser:
    """A plain callable (Prefill -> int) with the `name` the `BlockChooser` protocol asks for."""

    choose: Callable[[Prefill], int]
    name: str

    def __call__(self, prefill: Prefill) -> int:
        return self.choose(prefill)


def as_chooser(block_policy: Callable[[Prefill], int]) -> BlockChooser:
    """The callable itself if it is a `BlockChooser` (has a `name`), else wrapped once, named after its function."""
    if isinstance(block_policy, BlockChooser):
        return block_policy
    return NamedChooser(block_policy, getattr(block_policy, "__name__", type(block_policy).__name__))


@dataclass
class CalibratedPolicy:
    """A `BlockPolicy` choosing with this machine's cost model and the request's temperature, without touching
    the user's policy object."""

    policy: object  # BlockPolicy
    cost: CostModel | None
    temperature: float = 0.0

    @property
    def name(self) -> str:
        return self.policy.name

    def __call__(self, prefill: Prefill) -> int | DraftShape:
        return self.policy.choose(prefill, cost=self.cost, temperature=self.temperature)

    def choose_batch(self, prefills: list[Prefill]) -> int:
        return self.policy.choose_batch(prefills, cost=self.cost, temperature=self.temperature)


def with_call_options(
    shape: int | DraftShape | StepPlanner, tree_budget: int | None, lookup_tokens: int
) -> DraftShape | StepPlanner:
    """A bare block size drafted with the call's `tree_budget` (above size 1) and `lookup_tokens`; a `DraftShape`
    or `StepPlanner` (a policy over shapes, per-step choice) decides those itself."""
    if not isinstance(shape, int):
        return shape
    return DraftShape(shape, (tree_budget or 0) if shape > 1 else 0, lookup_tokens)


@dataclass
class CheckedChooser:
    """A chooser whose answer is checked against the target, drafter and options (`check_shape`), so a bad answer
    raises a clear error instead of reaching the engine: a policy can change speed, never correctness."""

    chooser: BlockChooser
    target: object
    drafter: object
    draft_sampling: bool = False
    tree_budget: int | None = None  # the call's options, for answers that are a bare block size
    lookup_tokens: int = 0

    @property
    def name(self) -> str:
        return self.chooser.name

    def __call__(self, prefill: Prefill) -> DraftShape | StepPlanner:
        return with_call_options(self._check(self.chooser(prefill)), self.tree_budget, self.lookup_tokens)

    def choose_batch(self, prefills: list[Prefill]) -> int | None:
        """One size for a whole batch when the wrapped chooser has a batch rule (`BlockPolicy.choose_batch`), else
        None: the rows are then asked one by one."""
        rule = getattr(self.chooser, "choose_batch", None)
        return None if rule is None else self._check(rule(prefills))

    def _check(self, answer):
        try:
            return check_shape(answer, self.target, self.drafter, self.draft_sampling)
        except (TypeError, ValueError) as err:
            raise type(err)(f"block_policy {self.name!r} returned an invalid block size or shape: {err}") from err


TEMPERATURE_TOLERANCE = 0.25  # a head trained this close to the request's temperature is taken as its own
_WARNED_TEMPERATURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # policy -> temperatures warned of


def _prepare_policy(
    policy, drafter, target, draft_sampling: bool, temperature: float
) -> CalibratedPolicy | PerStepPolicy:
    """Check the policy fits this target/drafter, pick this machine's calibration if one is cached, and warn (once
    per policy and temperature) when no head of the policy was trained near the request's temperature (its
    choices are then a guess). A per-step policy primes a `StepPlanner` per request; a per-request one picks a
    shape."""
    from .cost import load_calibration

    check_policy_compatible(policy.config, target, drafter)
    check_policy_sizes(policy.config, target, drafter, draft_sampling)
    trained = policy.config.temperatures
    warned = _WARNED_TEMPERATURES.setdefault(policy, set())
    if min(abs(t - temperature) for t in trained) > TEMPERATURE_TOLERANCE and temperature not in warned:
        warned.add(temperature)
        logger.warning(
            "block_policy %r was trained at temperature(s) %s but this request decodes at %g: sampling accepts fewer "
            "drafts (copied ones far fewer), so its choices may be slow. Make one with a head for this temperature: "
            "`blockpilot make-policy --temperatures 0,%g ...`.",
            policy.name,
            ", ".join(f"{t:g}" for t in trained),
            temperature,
            temperature,
        )
    calibration = load_calibration(target, drafter)
    if policy.config.decision == PER_STEP:
        costs = step_costs_for(target, drafter, policy.config.cost, calibration)
        return PerStepPolicy(costs, drafter.config.block_size - 1, policy, temperature, policy.name)
    return CalibratedPolicy(policy, policy.usable_cost_model(calibration), temperature)


_WARNED_UNCALIBRATED: set[str] = set()  # calibration paths warned of running on generic step costs


def step_costs_for(target, drafter, stored: CostModel | None, calibration: CostModel | None = None) -> StepCosts:
    """What per-step choice prices verify passes and drafter passes with: this machine's calibration (device,
    models, dtype) when cached, else the policy's stored costs, else a generic ladder, with a message (once)
    saying how to measure this machine."""
    from .cost import calibration_path, load_calibration

    calibration = calibration or load_calibration(target, drafter)
    if calibration is not None:
        return calibration.step_costs()
    path = calibration_path(target, drafter)
    if str(path) not in _WARNED_UNCALIBRATED:
        _WARNED_UNCALIBRATED.add(str(path))
        logger.warning(
            "No calibration of this device, models and dtype (%s): per-step choice prices steps with %s. Measure "
            "this machine once with `blockpilot calibrate --target ... --drafter ... --dtype ... --device ...`.",
            path,
            "the policy's stored costs" if stored is not None else "a generic cost ladder",
        )
    return stored.step_costs() if stored is not None else GENERIC_STEP_COSTS
