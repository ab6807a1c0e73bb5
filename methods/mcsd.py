"""mcsd: multi-candidate speculative decoding (MCSD): a k1 x ... x kg tree of draft-model
candidates, verified level by level by MCSS with or without replacement."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from costmodel.leviathan import expected_tokens_by_position
from costmodel.step import DraftPart, StepShape
from costmodel.trees import alpha_at_k_lookup, format_k_config, parse_k_config
from methods.config import Flag, IntTuple, MethodConfig, param
from methods.draws import TreeSampler
from methods.sd import chain_betas, drafter_model, own_kv
from methods.spec import MethodSpec, PlotSpec, SpaceOption, verdict
from common.errors import InputError

K_CHOICES = (1, 2, 4, 8, 16, 32)
MAX_DEPTH = 12              # deepest tree the sweep enumerates
DEFAULT_BUDGET = 64         # prod(k) the sweep goes up to
K_LOOKUP = 32               # alpha@k is read on k = 1..32 at least


@dataclass(frozen=True)
class MCSDConfig(MethodConfig):
    method = "mcsd"
    k: tuple = param(IntTuple("k", "candidates per level", parser=parse_k_config, text=format_k_config), (2, 2, 1))
    replacement: bool = param(Flag("repl", "draft with replacement", off="norepl"), True)


def _next_levels(prod: int, choices: tuple[int, ...], budget: int) -> list[int]:
    """The k a tree whose levels so far multiply to `prod` may add: the one rule both the
    enumeration and the count of k-configurations follow."""
    return [k for k in choices if prod * k <= budget]


def _checked(budget: int, choices) -> tuple[int, ...]:
    if budget < 1:
        raise InputError(f"--budget must be at least 1, got {budget}")
    return tuple(sorted(set(int(c) for c in choices)))


def k_configurations(budget: int = DEFAULT_BUDGET, choices=K_CHOICES, max_depth: int = MAX_DEPTH):
    """Every (k1, ..., kg), g = 1..max_depth, ki in `choices`, prod(k) <= budget: depth by depth,
    each in lexicographic order (a pruned depth-first product)."""
    choices = _checked(budget, choices)
    out: list[tuple[int, ...]] = []
    frontier: list[tuple[tuple[int, ...], int]] = [((), 1)]
    for _ in range(max_depth):
        nxt = [(prefix + (k,), prod * k) for prefix, prod in frontier for k in _next_levels(prod, choices, budget)]
        if not nxt:
            break
        out.extend(t for t, _ in nxt)
        frontier = nxt
    return out


def count_k_configurations(budget: int = DEFAULT_BUDGET, choices=K_CHOICES, max_depth: int = MAX_DEPTH) -> int:
    """len(k_configurations(...)) without enumerating them: trees counted per running product, so
    a budget of 10^8 is counted in milliseconds (the sweep's estimate before it builds a space)."""
    choices = _checked(budget, choices)
    total, frontier = 0, {1: 1}           # running product -> trees with it at the current depth
    for _ in range(max_depth):
        nxt: dict[int, int] = {}
        for prod, n in frontier.items():
            for k in _next_levels(prod, choices, budget):
                nxt[prod * k] = nxt.get(prod * k, 0) + n
        if not nxt:
            break
        total += sum(nxt.values())
        frontier = nxt
    return total


def k_matrix(ks, depth: np.ndarray | None = None) -> np.ndarray:
    """(n, max depth) array of k-configurations, padded with 1 past each one's depth."""
    depth = np.fromiter(map(len, ks), dtype=np.int64, count=len(ks)) if depth is None else np.asarray(depth)
    matrix = np.ones((len(ks), int(depth.max()) if len(ks) else 0), dtype=np.int64)
    for d in np.unique(depth):
        rows = np.flatnonzero(depth == d)
        matrix[rows, :d] = np.asarray([ks[i] for i in rows], dtype=np.int64).reshape(len(rows), d)
    return matrix


def level_matrix(frame: pd.DataFrame) -> np.ndarray:
    """k_matrix of a frame: from its k1.. columns (the sweep's space) or its `k` tuples."""
    cols = sorted((c for c in frame.columns if c[:1] == "k" and c[1:].isdigit()), key=lambda c: int(c[1:]))
    if not cols:
        return k_matrix([parse_k_config(k) for k in frame["k"]])
    levels = frame[cols].to_numpy(np.int64)
    depth = int((levels > 0).sum(axis=1).max())
    return np.where(levels[:, :depth] > 0, levels[:, :depth], 1)


def _depth(frame: pd.DataFrame, kmat: np.ndarray) -> np.ndarray:
    if "gamma" in frame.columns:
        return frame["gamma"].to_numpy(np.int64)
    return np.fromiter((len(parse_k_config(k)) for k in frame["k"]), dtype=np.int64, count=len(frame))


def widths(kmat: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """(C, D) sequences drafted at level i: prod(k_1..k_{i-1}); 0 past each tree's depth."""
    out = np.ones_like(kmat)
    out[:, 1:] = np.cumprod(kmat[:, :-1], axis=1)
    return np.where(np.arange(kmat.shape[1])[None, :] < depth[:, None], out, 0)


class MCSD(MethodSpec):
    name, config, summary = "mcsd", MCSDConfig, "k1 x ... x kg candidate tree of a draft model"
    drafter_kinds = ("draft_model",)

    def claims(self, evidence):
        """Acceptance rises with the candidates k (multi-candidate sampling's premise): alpha@k of each
        draft model's greedy entry, per dataset."""
        lines = []
        for dataset in evidence.datasets:
            for drafter in evidence.drafters_of("draft_model"):
                keys = evidence.profile.acceptance_for(drafter, temperature=0.0, dataset=dataset, needs="alpha_at_k")
                if not keys:
                    continue
                at_k = dict(evidence.profile.acceptance_model(keys[0]).alpha_at_k)
                ks = sorted(at_k)
                rising = all(at_k[x] <= at_k[y] for x, y in zip(ks, ks[1:]))
                lines.append(f"acceptance rises with k (MCSS, {drafter}, {dataset}): "
                             + ", ".join(f"alpha@{k} {at_k[k]:.3f}" for k in ks) + f" -> {verdict(rising)}")
        return lines
    needs = "alpha_at_k"
    decoder = "runtime.engine.mcsd:MCSD"
    calibration = ("mcsd k2x2x1 repl", "mcsd k4x2 repl", "mcsd k4x2x2x2 repl")
    batch_calibration = ("mcsd k2x2 norepl",)
    campaign = tuple(f"mcsd k{k} repl" for k in ("2x2", "4x2x1", "2x2x2", "4x4", "8x2", "3x2x2x1"))
    plot = PlotSpec(x="budget", hue="gamma", labels={"budget": "tree size, the product of k",
                                                            "gamma": "tree depth"})
    options = {"budget": SpaceOption(DEFAULT_BUDGET, "largest product of an MCSD k-configuration the sweep "
                                     "enumerates (about 10^4 trees at 64)")}
    no_counterpart = {
        "vllm": "vLLM drafts one chain per sequence; MCSD's candidate tree has no counterpart (nearest: sd)",
        "sglang": "SGLang drafts one chain (or one top-k tree) per step; MCSD's k1 x ... x kg candidates verified "
                  "level by level are not offered (nearest: sd)",
        "hf": "assisted generation drafts one chain (nearest: sd)"}

    def replayed_space(self, frame):
        """Exact replay keeps the monotone trees (candidates never widen with depth), MCSD's own rule."""
        return frame[frame["monotone"]].reset_index(drop=True)

    def space(self, setup, budget: int = DEFAULT_BUDGET, max_depth: int = MAX_DEPTH, choices=K_CHOICES):
        """k-configurations up to `budget` x replacement modes the acceptance entry records.
        Columns: k (tuple), replacement, gamma (depth), budget (prod k), tree_tokens, monotone,
        k1..k<max_depth> (levels, 0 past the depth). The same options give the same space, built once
        (a sweep asks for it once per acceptance entry); each caller gets its own copy."""
        modes = (True, False) if setup.acceptance.alpha_at_k_without_replacement else (True,)
        return _space(budget, max_depth, tuple(choices), modes).copy()

    def space_size(self, setup, budget: int = DEFAULT_BUDGET, max_depth: int = MAX_DEPTH, choices=K_CHOICES) -> int:
        """Rows of `space` with the same options, counted without building it."""
        modes = 2 if setup.acceptance.alpha_at_k_without_replacement else 1
        return modes * count_k_configurations(budget, choices=choices, max_depth=max_depth)

    def level_acceptance(self, setup, frame) -> np.ndarray:
        """(C, D) acceptance of level i with k_i candidates: alpha@k_i on the entry's curve
        (`AcceptanceModel.alpha_at`), its miss shrunk by the persistence at depth
        (`AcceptanceModel.miss_factor`). Where the entry records chains of each length (a greedy
        TokenTrace), level i misses as often as position i of a chain of the tree's depth
        (`methods.sd.chain_betas`), times the share of top-1 misses k_i candidates still miss,
        (1 - alpha@k_i) / (1 - alpha@1): a tree of one candidate per level is that chain, priced alike."""
        kmat = level_matrix(frame)
        repl = frame["replacement"].to_numpy(bool)
        k_axis = np.arange(1, max(K_LOOKUP, int(kmat.max())) + 1)
        beta, alpha_1 = np.empty(kmat.shape), np.empty(len(kmat))
        for mode in (True, False):
            if np.any(repl == mode):
                setup.need("alpha_at_k" if mode else "alpha_at_k_without_replacement", self.name)
                curve = np.asarray(setup.acceptance.alpha_at(k_axis, without_replacement=not mode), dtype=float)
                beta[repl == mode] = alpha_at_k_lookup(curve, kmat[repl == mode])
                alpha_1[repl == mode] = curve[0]
        if not setup.acceptance.alpha_by_position_at_gamma:
            return 1.0 - (1.0 - beta) * setup.acceptance.miss_factor(kmat.shape[1])[None, :]
        chain = chain_betas(setup.acceptance, _depth(frame, kmat))      # (C, D): D is the deepest tree
        still_missed = np.divide(1.0 - beta, 1.0 - alpha_1[:, None], out=np.zeros_like(beta),
                                 where=alpha_1[:, None] < 1.0)
        return 1.0 - (1.0 - chain) * np.minimum(still_missed, 1.0)

    def expected_tokens(self, setup, frame):
        """E = 1 + sum_i prod_{j<=i} alpha@k_j (costmodel.trees), whole matrix at once."""
        kmat = level_matrix(frame)
        return expected_tokens_by_position(self.level_acceptance(setup, frame), _depth(frame, kmat), setup.new_tokens)

    def step_shape(self, setup, frame):
        kmat = level_matrix(frame)
        depth = _depth(frame, kmat)
        w = widths(kmat, depth)
        tree = (np.cumprod(kmat, axis=1) * (w > 0)).sum(axis=1)
        return StepShape(setup.target, tree + 1.0, (DraftPart(drafter_model(setup)),), w,
                         overhead_s=setup.overhead_s, draft_kv_model=own_kv(setup))

    def sampler(self, setup, config, **options):
        frame = self.frame_of([config])
        return TreeSampler(list(config.k), self.level_acceptance(setup, frame)[0, :len(config.k)])

    def replay_rules(self, config):
        return {"levels": config.k}


SPEC = MCSD()
ORDER = 2


@lru_cache(maxsize=8)
def _space(budget: int, max_depth: int, choices: tuple[int, ...], modes: tuple[bool, ...]) -> pd.DataFrame:
    """`MCSDSpec.space`'s frame for one set of options."""
    ks = k_configurations(budget, choices=choices, max_depth=max_depth)
    gamma = np.fromiter(map(len, ks), dtype=np.int64, count=len(ks))
    kmat = k_matrix(ks, gamma)
    used = np.arange(kmat.shape[1])[None, :] < gamma[:, None]
    running = np.cumprod(kmat, axis=1)
    levels = {f"k{i + 1}": np.where(used[:, i], kmat[:, i], 0) for i in range(kmat.shape[1])}
    frames = [pd.DataFrame({"k": ks, "replacement": repl, "gamma": gamma, "budget": running[:, -1],
                            "tree_tokens": (running * used).sum(axis=1),
                            "monotone": np.all(np.diff(kmat, axis=1) <= 0, axis=1), **levels})
              for repl in modes]
    frame = pd.concat(frames, ignore_index=True)
    frame["config"] = MCSDConfig.labels(frame)
    return frame
