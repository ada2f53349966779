"""Draft trees: several continuations of one anchor verified in a single target pass (as in DDTree).

One drafter pass gives a distribution for every block position. Instead of the single argmax chain, the tree
holds the `budget` most likely continuations: best-first by the product of per-position probabilities (each
position is drafted independently given the context, so a node's score is the sum of its tokens' log-probs).
Nodes that share a prefix share positions. The target reads all nodes at once with a tree attention mask (a node
sees the cache, the anchor and its own ancestors) and per-node positions (anchor position + depth); the longest
root-to-node path that agrees with the target's own choices is committed, and only that path's cache entries
are kept.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from .acceptance import ScoreFn, target_choice

TREE_TOP_K = 8  # tokens per position a tree may branch into


@dataclass
class DraftTree:
    """Nodes 1..N below the root 0 (the anchor). A parent always comes before its children."""

    tokens: list[int]  # (N,) token of node i + 1
    parents: list[int]  # (N,) parent of node i + 1 (0 = the anchor)
    depths: list[int]  # (N,) depth of node i + 1 (1 = right after the anchor)

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, node: int) -> dict[int, int]:
        """token -> node index of `node`'s children."""
        return {t: i + 1 for i, (t, p) in enumerate(zip(self.tokens, self.parents, strict=True)) if p == node}

    def ancestor_mask(self) -> torch.Tensor:
        """(N + 1, N + 1) bool: [i, j] is True when j is i or an ancestor of i (the root included)."""
        n = len(self) + 1
        mask = torch.zeros(n, n, dtype=torch.bool)
        mask[0, 0] = True
        for i, parent in enumerate(self.parents, start=1):
            mask[i] = mask[parent]
            mask[i, i] = True
        return mask


def build_tree(draft_logits: torch.Tensor, budget: int, top_k: int = TREE_TOP_K) -> DraftTree:
    """The `budget` most probable continuations of (D, V) per-position draft logits, as a prefix-closed tree."""
    logp = torch.log_softmax(draft_logits.float(), dim=-1)
    values, indices = logp.topk(min(top_k, logp.shape[-1]), dim=-1)  # (D, K)
    return grow_tree(values.tolist(), indices.tolist(), budget)


def top_candidates(draft_logits: torch.Tensor, top_k: int = TREE_TOP_K) -> tuple[list[list[float]], list[list[int]]]:
    """The `top_k` likeliest tokens of each position of (D, V) draft logits: their probabilities (D, K), in
    descending order, and the tokens (D, K). One transfer to the host per step."""
    probs = torch.softmax(draft_logits.float(), dim=-1)
    values, indices = probs.topk(min(top_k, probs.shape[-1]), dim=-1)  # (D, K)
    return values.tolist(), indices.tolist()


def grow_tree(values: list[list[float]], indices: list[list[int]], budget: int) -> DraftTree:
    """The tree of `budget` nodes from each position's top log-probs `values` (D, K), best first, and their
    tokens `indices` (D, K).

    Best-first expansion: a heap of frontier nodes scored by their path's log-probability; taking a node
    offers its next sibling (the next-ranked token at the same depth) and its first child (the top token one
    position deeper). With budget D and K = 1 this is the argmax chain.
    """
    depth_limit, k = len(values), len(values[0]) if values else 0
    tree = DraftTree([], [], [])
    frontier = [(-values[0][0], 0, 0, 0)] if depth_limit and budget > 0 else []  # (-score, parent, depth, rank)
    while frontier and len(tree) < budget:
        neg, parent, depth, rank = heapq.heappop(frontier)
        tree.tokens.append(indices[depth][rank])
        tree.parents.append(parent)
        tree.depths.append(depth + 1)
        node = len(tree)
        if rank + 1 < k:
            heapq.heappush(frontier, (neg + values[depth][rank] - values[depth][rank + 1], parent, depth, rank + 1))
        if depth + 1 < depth_limit:
            heapq.heappush(frontier, (neg - values[depth + 1][0], node, depth + 1, 0))
    return tree


def add_branch(tree: DraftTree, tokens: list[int]) -> set[int]:
    """Add the chain `tokens` below the anchor as one more branch of `tree` (in place), following existing nodes
    while they hold the same tokens (shared prefixes share positions); returns the nodes it added.

    Prompt lookup's continuation joins the drafter's tree this way: one target pass verifies both."""
    added, node = set(), 0
    for depth, token in enumerate(tokens, start=1):
        child = tree.children(node).get(token)
        if child is None:
            tree.tokens.append(token)
            tree.parents.append(node)
            tree.depths.append(depth)
            child = len(tree)
            added.add(child)
        node = child
    return added


def tree_attention_mask(tree: DraftTree, past: int, dtype: torch.dtype, device) -> torch.Tensor:
    """(1, 1, N + 1, past + N + 1) additive mask: 0 where a node may attend (the cache, its ancestors, itself),
    the dtype's minimum elsewhere."""
    allowed = torch.cat([torch.ones(len(tree) + 1, past, dtype=torch.bool), tree.ancestor_mask()], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)


def accept_tree(
    tree: DraftTree, score: ScoreFn, do_sample: bool, generator: torch.Generator | None = None
) -> tuple[list[int], list[int]]:
    """The point-mass rule on a tree: from the root, draw the target's own token after the current node
    (`score(node, committed)` gives its processed scores given the committed prefix) and move to the child
    holding it while there is one. Returns (committed tokens, accepted node indices); the last token is the
    target's own. Every committed token is the target's choice given its exact prefix, so greedy output is plain
    greedy and sampled output has exactly the target's law."""
    committed: list[int] = []
    path: list[int] = []
    node = 0
    while True:
        token = target_choice(score(node, committed), do_sample, generator)
        committed.append(token)
        child = tree.children(node).get(token)
        if child is None:
            return committed, path
        path.append(child)
        node = child


def keep_cache_positions(cache, past: int, path: list[int]) -> None:
    """Keep the cache entries of positions [0, past], then those of the accepted nodes (in `path` order), and
    drop the other verified nodes: the accepted rows move up to right after the anchor (a copy of those few rows,
    not of the whole cache), then the cache is cropped behind them."""
    keep = past + 1 + len(path)
    if path:
        source = past + torch.tensor(path, dtype=torch.long)
        for layer in cache.layers:
            index = source.to(layer.keys.device)
            layer.keys[..., past + 1 : keep, :] = layer.keys.index_select(-2, index)
            layer.values[..., past + 1 : keep, :] = layer.values.index_select(-2, index)
    dropped = cache.get_seq_length() - keep
    if dropped:
        cache.crop(-dropped)
