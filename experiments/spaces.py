"""The search spaces of the sweep: one table of configurations per method (the design's catalogue).

Each `*_space` function returns a pandas DataFrame with one row per configuration and one column
per hyperparameter, in a fixed, deterministic order, plus a `config` column holding a short
human-readable label (e.g. "4x2x1", "W15 N5 G15"). Nothing here scores anything; the scorers
in `experiments.scoring` take these tables as they are.

| method    | space                                                                       |
| --------- | --------------------------------------------------------------------------- |
| sd        | gamma 1..12                                                                 |
| mcsd      | k1 x ... x kg, ki in {1,2,4,8,16,32}, prod(k) <= budget, with/without repl. |
| cape      | non-increasing bin arrays over floor(10*conf) (11 bins) x gamma             |
| lookahead | W, N, G (G in {1, W/2, W, 2W}) x prompt n-grams on/off                      |
| kangaroo  | exit layer x max draft steps x eta                                          |
| coral     | router groups N in {4..64} x top-n (n <= N/2, plus "no router") x depth     |
"""
from __future__ import annotations

import itertools
from typing import Callable

import numpy as np
import pandas as pd

from common.errors import InputError

METHODS = ("sd", "mcsd", "cape", "lookahead", "kangaroo", "coral")

SD_GAMMAS = tuple(range(1, 13))
MCSD_K_CHOICES = (1, 2, 4, 8, 16, 32)
MCSD_MAX_DEPTH = 12
DEFAULT_BUDGET = 64
CAPE_BINS = 11                      # floor(10 * conf) for conf in [0, 1]
CAPE_VALUES = (1, 2, 4, 6, 8)       # candidates per position; the paper's array uses 8, 6, 4, 2
CAPE_GAMMAS = tuple(range(1, 9))
LOOKAHEAD_W = tuple(range(1, 21))
LOOKAHEAD_N = tuple(range(2, 9))
KANGAROO_ETA = tuple(np.round(np.arange(0.0, 1.0, 0.05), 2))
KANGAROO_STEPS = tuple(range(1, 11))
CORAL_GROUPS = (4, 8, 16, 32, 64)
CORAL_TOP_N = (1, 2, 3, 4, 6, 8)
CORAL_DEPTHS = tuple(range(1, 9))


def sd_space(max_gamma: int = SD_GAMMAS[-1]) -> pd.DataFrame:
    """Chain speculative decoding with a draft model: the draft length gamma."""
    gammas = np.arange(1, max_gamma + 1)
    return pd.DataFrame({"gamma": gammas, "config": [f"gamma={g}" for g in gammas]})


def k_configurations(budget: int = DEFAULT_BUDGET, choices=MCSD_K_CHOICES, max_depth: int = MCSD_MAX_DEPTH):
    """Every tuple (k1, ..., kg), g = 1..max_depth, ki in `choices`, with prod(k) <= budget.

    Enumerated depth by depth, each depth in lexicographic order; a depth-first product with
    pruning keeps this fast (about 50 000 tuples at budget 64, depth 12).
    """
    if budget < 1:
        raise InputError(f"--budget must be at least 1, got {budget}")
    choices = tuple(sorted(set(int(c) for c in choices)))
    out: list[tuple[int, ...]] = []
    frontier: list[tuple[tuple[int, ...], int]] = [((), 1)]
    for _ in range(max_depth):
        nxt = []
        for prefix, prod in frontier:
            for k in choices:
                if prod * k > budget:
                    break
                nxt.append((prefix + (k,), prod * k))
        if not nxt:
            break
        out.extend(t for t, _ in nxt)
        frontier = nxt
    return out


def mcsd_space(budget: int = DEFAULT_BUDGET, max_depth: int = MCSD_MAX_DEPTH, replacement=(True, False),
               choices=MCSD_K_CHOICES) -> pd.DataFrame:
    """Multi-candidate trees: k-configurations up to `budget`, each with and without replacement.

    Columns: `k` (text "4x2x1"), `k1`..`k<max_depth>` (the levels, 0 past the depth; `level_matrix`
    reads them back), `gamma` (depth), `budget` (prod k), `tree_tokens` (nodes of the tree,
    sum over depths of the running product), `monotone` (non-increasing k), `replacement`.
    """
    ks = k_configurations(budget, choices=choices, max_depth=max_depth)
    gamma = np.fromiter(map(len, ks), dtype=np.int64, count=len(ks))
    kmat = k_matrix(ks, gamma)
    used = np.arange(kmat.shape[1])[None, :] < gamma[:, None]
    running = np.cumprod(kmat, axis=1)
    prod = running[:, -1]
    nodes = (running * used).sum(axis=1)
    mono = np.all(np.diff(kmat, axis=1) <= 0, axis=1)   # padding with 1 never breaks the order
    labels = ["x".join(map(str, k)) for k in ks]
    levels = {f"k{i + 1}": np.where(used[:, i], kmat[:, i], 0) for i in range(kmat.shape[1])}
    frames = []
    for repl in replacement:
        frames.append(
            pd.DataFrame(
                {
                    "k": labels,
                    "gamma": gamma,
                    "budget": prod,
                    "tree_tokens": nodes,
                    "monotone": mono,
                    "replacement": bool(repl),
                    "config": [f"{lab} {'w/' if repl else 'w/o'} repl" for lab in labels],
                    **levels,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def k_matrix(ks: list[tuple[int, ...]], depth: np.ndarray | None = None) -> np.ndarray:
    """(n, max depth) array of k-configurations, padded with 1 past each one's depth."""
    depth = np.fromiter(map(len, ks), dtype=np.int64, count=len(ks)) if depth is None else np.asarray(depth)
    matrix = np.ones((len(ks), int(depth.max()) if len(ks) else 0), dtype=np.int64)
    for d in np.unique(depth):
        rows = np.flatnonzero(depth == d)
        matrix[rows, :d] = np.asarray([ks[i] for i in rows], dtype=np.int64).reshape(len(rows), d)
    return matrix


def level_matrix(frame: pd.DataFrame) -> np.ndarray:
    """k_matrix of an mcsd space (or a slice of one) from its k1.. columns, padded with 1."""
    cols = sorted((c for c in frame.columns if c[:1] == "k" and c[1:].isdigit()), key=lambda c: int(c[1:]))
    levels = frame[cols].to_numpy(np.int64)
    depth = int(frame["gamma"].max())
    return np.where(levels[:, :depth] > 0, levels[:, :depth], 1)


def nonincreasing_arrays(length: int = CAPE_BINS, values=CAPE_VALUES) -> np.ndarray:
    """Every array of `length` entries from `values`, non-increasing left to right.

    Shape (n, length); n = C(length + m - 1, m - 1) for m values. Entry i is the number of
    candidates kept at a position whose drafter confidence falls in bin i = floor(10 * conf):
    low confidence keeps more candidates, hence non-increasing.
    """
    vals = sorted(set(int(v) for v in values), reverse=True)
    rows = [
        [vals[j] for j in combo]
        for combo in itertools.combinations_with_replacement(range(len(vals)), length)
    ]
    return np.asarray(rows, dtype=np.int64).reshape(-1, length)


def cape_space(gammas=CAPE_GAMMAS, values=CAPE_VALUES) -> pd.DataFrame:
    """CAPE: a confidence bin array S (11 bins) times the proposal length gamma."""
    arrays = nonincreasing_arrays(CAPE_BINS, values)
    g = np.repeat(np.asarray(gammas, dtype=np.int64), len(arrays))
    s = np.tile(arrays, (len(gammas), 1))
    labels = ["".join(_bin_char(v) for v in row) for row in arrays]
    return pd.DataFrame(
        {
            "gamma": g,
            "bins": [tuple(int(v) for v in row) for row in s],
            "bins_mean": s.mean(axis=1),
            "bins_max": s.max(axis=1),
            "config": [f"gamma={gi} S={labels[i % len(arrays)]}" for i, gi in enumerate(g)],
        }
    )


def _bin_char(v: int) -> str:
    return str(v) if v < 10 else chr(ord("a") + v - 10)


def lookahead_space(windows=LOOKAHEAD_W, ngrams=LOOKAHEAD_N, prompt_ngrams=(False,)) -> pd.DataFrame:
    """Lookahead decoding: window W, n-gram size N, verification branch G, prompt n-grams.

    Prompt-as-reference n-grams default to off only: `costmodel.lookahead` does not model them
    (pass prompt_ngrams=(False, True) for a scorer that does)."""
    rows = []
    for w, n, use_prompt in itertools.product(windows, ngrams, prompt_ngrams):
        for g in sorted({1, max(1, w // 2), w, 2 * w}):
            rows.append((w, n, g, use_prompt))
    frame = pd.DataFrame(rows, columns=["W", "N", "G", "prompt_ngrams"])
    frame["tokens_per_forward"] = (frame.W + frame.G) * (frame.N - 1) + 1
    frame["config"] = [
        f"W{w} N{n} G{g}{' +prompt' if p else ''}"
        for w, n, g, p in frame[["W", "N", "G", "prompt_ngrams"]].itertuples(index=False)
    ]
    return frame


def kangaroo_space(exit_layers=(2,), steps=KANGAROO_STEPS, etas=KANGAROO_ETA) -> pd.DataFrame:
    """Kangaroo self-drafting: exit layer, maximum draft steps, early-stop threshold eta."""
    rows = list(itertools.product(exit_layers, steps, etas))
    frame = pd.DataFrame(rows, columns=["exit_layer", "gamma", "eta"])
    frame["exit_layer"] = frame.exit_layer.astype(np.int64)
    frame["gamma"] = frame.gamma.astype(np.int64)
    frame["eta"] = frame.eta.astype(float)
    frame["config"] = [f"layer {l} gamma={g} eta={e:.2f}" for l, g, e in rows]
    return frame


def coral_space(groups=CORAL_GROUPS, top_n=CORAL_TOP_N, depths=CORAL_DEPTHS, pairs=None,
                built_in: tuple[int, int] | None = None) -> pd.DataFrame:
    """CORAL/EAGLE feature drafter with an LM-head router: groups N, top-n, chain depth.

    Column `groups` is the paper's N; groups = 0 stands for "no router" (the full LM head), as the
    "N/A" row of CORAL Table 4. Column names follow `simulator.methods` configs. `pairs` restricts
    the (groups, top_n) grid (e.g. to those with a recorded router recall); `built_in` marks a
    drafter whose own head already routes (its (groups, top_n) is then the only one).
    """
    if built_in is not None:
        pairs = [tuple(built_in)]
    else:
        grid = [(n, t) for n in groups for t in top_n if t <= n // 2]
        pairs = [(0, 0)] + [p for p in grid if pairs is None or tuple(p) in set(map(tuple, pairs))]
    rows = [(n, t, d) for (n, t) in pairs for d in depths]
    frame = pd.DataFrame(rows, columns=["groups", "top_n", "gamma"])
    frame["router_built_in"] = built_in is not None
    frame["active_fraction"] = np.where(frame.groups > 0, frame.top_n / frame.groups.clip(lower=1), 1.0)
    frame["config"] = [
        (f"N={n} top-{t}{' (drafter)' if built_in else ''} gamma={d}" if n else f"no router gamma={d}")
        for n, t, d in rows
    ]
    return frame


SPACES: dict[str, Callable[..., pd.DataFrame]] = {
    "sd": sd_space,
    "mcsd": mcsd_space,
    "cape": cape_space,
    "lookahead": lookahead_space,
    "kangaroo": kangaroo_space,
    "coral": coral_space,
}


def parse_methods(text: str | None) -> list[str]:
    """'sd,mcsd' -> ['sd', 'mcsd']; None or 'all' -> every method. Unknown names: InputError."""
    if text is None or text.strip().lower() in ("", "all"):
        return list(METHODS)
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise InputError(f"unknown method '{unknown[0]}' (known: {', '.join(METHODS)})")
    return list(dict.fromkeys(names))
