"""Per-step choice of what to verify: the candidate set with the most expected tokens per second, every step.

Before each verify pass the engine knows the prompt-lookup continuation on offer and, after one drafter pass, the
drafter's per-position distributions. A `StepPlanner` turns them into a chance of acceptance for every candidate
node and verifies the set S that maximises

    E[tokens committed] / seconds = (1 + sum_{v in S} P(v accepted)) / (drafter pass + verify(|S| + 1 rows))

P(v) is the product, along v's path, of each node's chance of being accepted once its parent is. Those chances
are learnt per request, starting from a prior (`StepPrior`, which a BlockPilot head shifts from the prefill):
a drafted node's by the drafter's own probability q of its token, mapped through Beta posteriors per q bucket (a
calibration of the drafter's confidence); a copied node's by Beta posteriors of its first token (by the order of
the n-gram match it came from, or a copy the target has been following) and of each further one. Every verified step updates them with what the target chose, including what it would have done
with candidates left unverified (the committed tokens tell).

Whether to run the drafter is decided before it runs: the best copy on offer (or plain decoding) against the
drafter steps' expected rate so far. A choice made from the committed text and the drafter's outputs alone never
reads the target's not-yet-computed tokens, so the verify rule, and losslessness with it, is untouched: greedy
output stays plain greedy, sampled output keeps the target's law.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import time
from dataclasses import dataclass, field, replace

import torch

from .lookup import Copy
from .tree import DraftTree, add_branch, grow_tree, top_candidates

# Upper edges of the buckets of the drafter's probability q (the last bucket runs to 1).
Q_EDGES = (0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95)
Q_MIDS = (0.025, 0.1, 0.225, 0.4, 0.6, 0.775, 0.9, 0.975)
PROBE_EVERY = 8  # run the drafter at least every this many steps, so its estimate follows the request
PLAN_TOP_K = 4  # drafter candidates per position a planned tree may branch into (and that it learns from)
RATE_MEMORY = 0.7  # weight of the past in the running estimate of a drafter step's tokens and rows
COPY_ORDERS = 3  # a fresh copy's first-token chance is learnt per n-gram match order 1, 2, 3 (and longer)


def interpolate(points: list[int], seconds: list[float], x: int) -> float:
    """Seconds at `x` on a ladder measured at sorted `points`: linear between points, beyond them along the
    nearest slope (never below a nanosecond)."""
    if x in points:
        return seconds[points.index(x)]
    if len(points) == 1:
        return seconds[0]
    i = 1
    while i < len(points) - 1 and points[i] < x:
        i += 1
    lo, hi = i - 1, i
    slope = (seconds[hi] - seconds[lo]) / (points[hi] - points[lo])
    return max(seconds[lo] + slope * (x - points[lo]), 1e-9)


@dataclass(frozen=True)
class StepCosts:
    """What a step's parts cost on one device and dtype: a target pass verifying n rows after some cached tokens
    (a ladder measured at `verify_context` cached tokens, interpolated between its points) and one drafter pass.

    Each verified row attends to every cached token, so rows cost more in a long text (on a CPU, a row at 768
    tokens costs about twice one at 128): with `long_seconds`, the same ladder measured at `long_context`, a pass
    is priced linearly in the context between and beyond the two (never below the first ladder)."""

    verify_rows: tuple[int, ...]
    verify_seconds: tuple[float, ...]
    draft_seconds: float
    verify_context: int = 0
    long_context: int = 0
    long_seconds: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.verify_rows or len(self.verify_rows) != len(self.verify_seconds) or self.verify_rows[0] != 1:
            raise ValueError(f"StepCosts needs a verify ladder starting at 1 row, got {self.verify_rows}.")
        if min(self.verify_seconds) <= 0 or self.draft_seconds < 0:
            raise ValueError("StepCosts seconds must be positive (the drafter pass may be free: 0).")
        if self.long_seconds and (
            len(self.long_seconds) != len(self.verify_rows) or self.long_context <= self.verify_context
        ):
            raise ValueError(
                "StepCosts.long_seconds needs one value per verified row count, measured at a longer context "
                f"(long_context {self.long_context} > verify_context {self.verify_context})."
            )

    @property
    def max_rows(self) -> int:
        """The most rows a step may verify: the ladder's last point (costs beyond it are not known)."""
        return self.verify_rows[-1]

    def verify(self, rows: int, context: int = 0) -> float:
        """Seconds of a target pass verifying `rows` rows after `context` cached tokens."""
        short = interpolate(list(self.verify_rows), list(self.verify_seconds), rows)
        if not self.long_seconds or context <= self.verify_context:
            return short
        long = interpolate(list(self.verify_rows), list(self.long_seconds), rows)
        share = (context - self.verify_context) / (self.long_context - self.verify_context)
        return max(short + share * (long - short), short)


@dataclass
class StepPrior:
    """A request's acceptance chances before its first step.

    `draft_calibration`: per q bucket (`Q_MIDS`), the chance a drafted token is accepted once its parent is (a
    drafter whose confidence is honest has the bucket's q; `blockpilot fit-step-prior` measures it per temperature).
    `lookup_first`: per n-gram match order (1, 2, 3+), the chance of a fresh copy's first token; `lookup_on_track`:
    the first copied token's chance when the target followed the copy on offer through the whole step before (a
    copy in progress, such as an answer restating its prompt); `lookup_next`: each next copied token's chance once
    the earlier ones were accepted. `strength`: how many observations each prior mean is worth against the
    request's own.
    `drafter_rate`: the per-token rate of a drafter chain, which decides whether to run the drafter before any
    drafter step is seen. `reference_draft` / `reference_lookup`: the per-token rates a BlockPilot head predicted on
    average over the prompts these chances were measured on; a request's own prediction shifts them
    (`for_request`)."""

    draft_calibration: list[float] = field(default_factory=lambda: list(Q_MIDS))
    lookup_first: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.7])
    lookup_next: float = 0.8
    lookup_on_track: float = 0.8
    strength: float = 8.0
    drafter_rate: float = 0.5
    reference_draft: float | None = None
    reference_lookup: float | None = None

    def __post_init__(self) -> None:
        if len(self.draft_calibration) != len(Q_MIDS):
            raise ValueError(f"StepPrior.draft_calibration needs {len(Q_MIDS)} values (one per q bucket).")
        if len(self.lookup_first) != COPY_ORDERS:
            raise ValueError(f"StepPrior.lookup_first needs {COPY_ORDERS} values (n-gram match orders 1, 2, 3+).")
        rates = [*self.draft_calibration, *self.lookup_first, self.lookup_next, self.lookup_on_track, self.drafter_rate]
        rates += [r for r in (self.reference_draft, self.reference_lookup) if r is not None]
        if not all(0.0 <= r <= 1.0 for r in rates):
            raise ValueError(f"StepPrior rates are probabilities, got {rates}.")
        if self.strength <= 0:
            raise ValueError(f"StepPrior.strength must be > 0, got {self.strength}.")

    def for_request(self, draft_rate: float, lookup_rate: float) -> StepPrior:
        """This prior shifted to one request whose head predicts per-token rates `draft_rate` / `lookup_rate`: each
        chance's odds multiplied by the prediction's odds over the reference's (no shift without a reference)."""
        draft = _odds_ratio(draft_rate, self.reference_draft)
        lookup = _odds_ratio(lookup_rate, self.reference_lookup)
        return replace(
            self,
            draft_calibration=[_shift(p, draft) for p in self.draft_calibration],
            lookup_first=[_shift(p, lookup) for p in self.lookup_first],
            lookup_next=_shift(self.lookup_next, lookup),
            lookup_on_track=_shift(self.lookup_on_track, lookup),
            drafter_rate=_shift(self.drafter_rate, draft),
        )


def _odds_ratio(rate: float, reference: float | None) -> float:
    if reference is None:
        return 1.0
    clip = lambda p: min(max(p, 0.01), 0.99)  # noqa: E731
    return (clip(rate) / (1 - clip(rate))) / (clip(reference) / (1 - clip(reference)))


def _shift(p: float, ratio: float) -> float:
    """p with its odds multiplied by `ratio`."""
    if ratio == 1.0 or p in (0.0, 1.0):
        return p
    odds = p / (1 - p) * ratio
    return odds / (1 + odds)


@dataclass
class Beta:
    """A Beta posterior of one acceptance chance: `accepted` and `rejected` pseudo-counts."""

    accepted: float
    rejected: float

    @classmethod
    def prior(cls, mean: float, strength: float) -> Beta:
        mean = min(max(mean, 0.01), 0.99)
        return cls(mean * strength, (1 - mean) * strength)

    @property
    def mean(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def observe(self, accepted: bool) -> None:
        if accepted:
            self.accepted += 1
        else:
            self.rejected += 1


@dataclass
class StepPlan:
    """What one step verifies: a tree below the anchor (a chain when every node's parent is the one before),
    which of its nodes came from prompt lookup, and what the planner needs to learn from the outcome."""

    tree: DraftTree
    lookup_nodes: set[int]
    ran_drafter: bool
    copy: Copy = field(default_factory=Copy)  # the copy on offer (verified or not)
    top_probs: list[list[float]] = field(default_factory=list)  # (D, K) drafter probabilities per position
    top_tokens: list[list[int]] = field(default_factory=list)  # (D, K) their tokens

    @property
    def is_chain(self) -> bool:
        return all(parent == i for i, parent in enumerate(self.tree.parents))


class StepPlanner:
    """Chooses each step's verified nodes for one request (build a new one per request: it learns as it goes).

    `max_depth`: drafted positions per drafter pass (the drafter's block size - 1); `max_nodes`: most drafted
    nodes per step; `max_lookup`: longest copy verified."""

    def __init__(
        self,
        costs: StepCosts,
        prior: StepPrior | None = None,
        *,
        max_depth: int,
        max_nodes: int = 24,
        max_lookup: int = 16,
        name: str = "per-step",
    ):
        if max_depth < 1 or max_nodes < 1 or max_lookup < 0:
            raise ValueError(f"StepPlanner needs max_depth, max_nodes >= 1 and max_lookup >= 0 ({name}).")
        self.costs, self.prior, self.name = costs, prior or StepPrior(), name
        self.max_depth, self.max_nodes, self.max_lookup = max_depth, max_nodes, max_lookup
        p = self.prior
        self.draft = [Beta.prior(m, p.strength) for m in p.draft_calibration]
        # The copy's chances: its first token fresh (by match order), or while a copy is on track; each next token.
        self.lookup_first = [Beta.prior(m, p.strength) for m in p.lookup_first]
        self.lookup_on_track = Beta.prior(p.lookup_on_track, p.strength)
        self.lookup_next = Beta.prior(p.lookup_next, p.strength)
        self.on_track = False  # the target followed the copy on offer through the last step
        # A drafter step's expected committed tokens and rows, before any is seen: a chain at the prior's rate.
        self.drafter_tokens = sum(p.drafter_rate**d for d in range(max_depth + 1))
        self.drafter_rows = float(max_depth + 1)
        self.steps_without_drafter = 0
        self.context = 0  # tokens of text before the step being planned
        self.seconds = 0.0  # time spent deciding and learning (the decision overhead), drafter passes excluded

    # ---- acceptance chances ---------------------------------------------------------------------------------------
    def draft_chances(self) -> list[float]:
        """Per q bucket, the chance a drafted token is accepted after its parent; made non-decreasing in q."""
        chances, low = [], 0.0
        for beta in self.draft:
            low = max(low, beta.mean)
            chances.append(low)
        return chances

    def first_copied(self, order: int) -> Beta:
        """The posterior of a copy's first token: the on-track one while the target follows a copy, else the fresh
        one of the match's n-gram order."""
        return self.lookup_on_track if self.on_track else self.lookup_first[min(max(order, 1), COPY_ORDERS) - 1]

    def copy_chances(self, n: int, order: int) -> list[float]:
        """(n,) chance that each of the first n copied tokens of a match of `order` is accepted (all before it too)."""
        first, later = self.first_copied(order).mean, self.lookup_next.mean
        return [first * later**j for j in range(n)]

    # ---- the decision -------------------------------------------------------------------------------------------
    def best_copy(self, copy: Copy, extra_rows: int = 0, extra_tokens: float = 0.0, draft: float = 0.0):
        """(tokens per second, length) of the best prefix of the copy verified after `extra_rows` other rows
        worth `extra_tokens` expected tokens (the anchor counts 1 of each)."""
        verify = self._verify
        tokens = 1.0 + extra_tokens
        best = (tokens / (draft + verify(1 + extra_rows)), 0)
        room = min(len(copy.tokens), self.max_lookup, self.costs.max_rows - 1 - extra_rows)
        for k, chance in enumerate(self.copy_chances(max(room, 0), copy.order), start=1):
            tokens += chance
            best = max(best, (tokens / (draft + verify(1 + extra_rows + k)), k))
        return best

    def wants_drafter(self, copy: Copy, context: int) -> bool:
        """Whether this step should run the drafter: its expected rate (with the copy as one more branch) beats
        the best copy alone (plain decoding when nothing is copied), or it has not run for `PROBE_EVERY` steps.
        `context`: the tokens in the text so far (what each verified row attends to)."""
        self.context = context
        with self._timed():
            if self.steps_without_drafter >= PROBE_EVERY:
                return True
            alone, _ = self.best_copy(copy)
            extra = round(self.drafter_rows - 1)
            together, _ = self.best_copy(copy, extra, self.drafter_tokens - 1, self.costs.draft_seconds)
            return together > alone

    def plan(self, copy: Copy, draft_logits: torch.Tensor | None, context: int) -> StepPlan:
        """The nodes to verify this step after `context` tokens of text, from the copy on offer and, when the
        drafter ran, its (D, V) logits."""
        self.context = context
        with self._timed():
            return self._plan(copy, draft_logits)

    def _plan(self, copy: Copy, draft_logits: torch.Tensor | None) -> StepPlan:
        if draft_logits is None:
            self.steps_without_drafter += 1
            _, k = self.best_copy(copy)
            tree = DraftTree([], [], [])
            return StepPlan(tree, add_branch(tree, copy.tokens[:k]), False, copy)
        self.steps_without_drafter = 0
        probs, tokens = top_candidates(draft_logits, PLAN_TOP_K)
        chances = self.draft_chances()
        values = [[math.log(max(chances[_bucket(q)], 1e-6)) for q in row] for row in probs]
        budget = min(self.max_nodes, self.costs.max_rows - 1)
        full = grow_tree(values, tokens, budget)  # best first: every prefix is a tree
        path = _path_chances(full, values, tokens)
        draft, verify = self.costs.draft_seconds, self._verify
        tokens_so_far, best_rate, best_n = 1.0, 1.0 / (draft + verify(1)), 0
        for n, chance in enumerate(path, start=1):
            tokens_so_far += chance
            rate = tokens_so_far / (draft + verify(n + 1))
            if rate > best_rate:
                best_rate, best_n = rate, n
        tree = DraftTree(full.tokens[:best_n], full.parents[:best_n], full.depths[:best_n])
        expected = 1.0 + sum(path[:best_n])
        _, k = self.best_copy(copy, best_n, expected - 1, draft)
        lookup_nodes = add_branch(tree, copy.tokens[:k])
        m = RATE_MEMORY
        self.drafter_tokens = m * self.drafter_tokens + (1 - m) * expected
        self.drafter_rows = m * self.drafter_rows + (1 - m) * (best_n + 1)
        return StepPlan(tree, lookup_nodes, True, copy, probs, tokens)

    # ---- learning -------------------------------------------------------------------------------------------------
    def observe(self, plan: StepPlan, committed: list[int]) -> None:
        """Learn from the target's committed tokens (K,): whether each copied token, and each drafter candidate
        of the top-K per position, would have been accepted where its parent was (verified or not)."""
        with self._timed():
            self._observe(plan, committed)

    def _observe(self, plan: StepPlan, committed: list[int]) -> None:
        copied, first = plan.copy.tokens, self.first_copied(plan.copy.order)
        for j, token in enumerate(copied[: len(committed)]):
            (first if j == 0 else self.lookup_next).observe(token == committed[j])
            if token != committed[j]:
                break
        followed = min(len(copied), len(committed))
        self.on_track = followed > 0 and copied[:followed] == committed[:followed]
        for depth, (row_probs, row_tokens) in enumerate(zip(plan.top_probs, plan.top_tokens, strict=True)):
            if depth >= len(committed):
                break
            for q, token in zip(row_probs, row_tokens, strict=True):
                self.draft[_bucket(q)].observe(token == committed[depth])
            if committed[depth] not in row_tokens:  # the target left every drafted path: nothing deeper to learn
                break

    def _verify(self, rows: int) -> float:
        return self.costs.verify(rows, self.context)

    @contextlib.contextmanager
    def _timed(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start


def _bucket(q: float) -> int:
    return bisect.bisect_left(Q_EDGES, q)


def _path_chances(tree: DraftTree, values: list[list[float]], tokens: list[list[int]]) -> list[float]:
    """(N,) chance of each node's whole path being accepted: the product of its nodes' chances, whose logs are
    `values` (D, K) for the candidate `tokens` (D, K) of each depth."""
    path: list[float] = []
    for token, parent, depth in zip(tree.tokens, tree.parents, tree.depths, strict=True):
        above = path[parent - 1] if parent else 1.0
        path.append(above * math.exp(values[depth - 1][tokens[depth - 1].index(token)]))
    return path
