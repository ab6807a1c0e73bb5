"""Per-method scorers of `experiments.scoring.score`: expected tokens and the step's forwards.

Each `_score_<method>(profile, base, configs, lat, acc)` returns, over the whole configuration
frame at once, the expected tokens per step (closed forms of `costmodel`), the draft seconds, the
verify forward's query tokens and model, and the step's overhead. Which forwards a step runs comes
from `simulator.methods.build_step_model` (the one description of each method's step); their
seconds from `Latency`, the Profile's fitted latency models evaluated over arrays.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from calibrate.profile import Profile

MCSD_K_MAX = 32   # alpha@k is looked up on k = 1..32 at least


# ---- latency over arrays -----------------------------------------------------------------------

class Latency:
    """`t(model, n_tokens, ctx, batch)` in seconds from the profile's fitted models, over arrays."""

    def __init__(self, profile: Profile, setting: Any):
        """`setting`: an `experiments.scoring.Setting` (ctx_len, batch)."""
        self.profile, self.setting = profile, setting
        self._models: dict[str, Any] = {}

    def __call__(self, model: str, n_tokens, ctx_offset=0) -> np.ndarray:
        if model not in self._models:
            self._models[model] = self.profile.latency_model(model)
        n = np.maximum(np.asarray(n_tokens, dtype=float), 1.0)
        ctx = self.setting.ctx_len + np.asarray(ctx_offset, dtype=float)
        return np.asarray(self._models[model].predict(n, ctx, self.setting.batch), dtype=float)

    def parts(self, parts, width=1, ctx_offset=0) -> np.ndarray:
        """Seconds of one draft forward made of (model, tokens, scale) parts, `width` sequences wide."""
        return sum(scale * self(model, np.asarray(width) * tokens, ctx_offset) for model, tokens, scale in parts)


def _template(profile: Profile, method: str, config: dict[str, Any]):
    """The simulator's step model of one configuration: which forwards a step runs (models, scales)."""
    from simulator.methods import build_step_model

    return build_step_model(profile, method, config)


def _level_seconds(lat: Latency, parts, depth: int) -> np.ndarray:
    """(depth,) seconds of draft forward i = 0..depth-1 made of `parts`, context growing by one each."""
    return np.array([float(np.asarray(lat.parts(parts, 1, i)).reshape(-1)[0]) for i in range(depth)])


def _chain(lat: Latency, parts, gamma: np.ndarray, reach: np.ndarray | None = None) -> np.ndarray:
    """Draft seconds of chains of `gamma` forwards; forward i paid with probability reach[:, i] (default 1)."""
    g_max = int(gamma.max())
    paid = (np.arange(g_max)[None, :] < gamma[:, None]).astype(float)
    if reach is not None:
        paid = paid * reach
    return paid @ _level_seconds(lat, parts, g_max)


def _parts(step, tokens, drafted, verify, draft_s) -> dict[str, Any]:
    return dict(tokens=np.asarray(tokens, float), drafted=np.asarray(drafted, float),
                verify=np.asarray(verify, float), draft_s=np.asarray(draft_s, float),
                verify_model=step.verify_model, verify_scale=step.verify_scale, overhead=step.overhead_s)


def _score_sd(profile, base, frame, lat, acc):
    """Leviathan with per-position acceptance: E = 1 + sum_i prod_{j<=i} beta_j."""
    from costmodel.leviathan import expected_tokens_by_position

    gamma = frame["gamma"].to_numpy(np.int64)
    step = _template(profile, "sd", {**base, "gamma": 1})
    tokens = expected_tokens_by_position(acc.beta(int(gamma.max())), gamma)
    return _parts(step, tokens, gamma, gamma + 1, _chain(lat, step.draft_parts[0], gamma))


def _score_mcsd(profile, base, frame, lat, acc):
    """E = 1 + sum_i prod_{j<=i} alpha@k_j (costmodel.trees' expectation, evaluated on the whole
    (configurations x depth) matrix at once through `expected_tokens_by_position`). alpha@k for a
    k the profile did not record is the acceptance model's interpolation (flat past the largest)."""
    from costmodel.leviathan import expected_tokens_by_position
    from costmodel.trees import alpha_at_k_lookup
    from experiments.spaces import level_matrix

    depth = frame["gamma"].to_numpy(np.int64)
    kmat = level_matrix(frame)
    repl = frame["replacement"].to_numpy(bool)
    k_axis = np.arange(1, max(MCSD_K_MAX, int(kmat.max())) + 1)
    beta = np.empty(kmat.shape)
    for mode in (True, False):
        if np.any(repl == mode):
            curve = np.asarray(acc.alpha_at(k_axis, without_replacement=not mode), dtype=float)
            beta[repl == mode] = alpha_at_k_lookup(curve, kmat[repl == mode])
    tokens = expected_tokens_by_position(beta, depth)
    step = _template(profile, "sd", {**base, "gamma": 1})      # one drafter forward, as mcsd's levels
    widths = np.ones_like(kmat)                                # level i drafts prod(k_1..k_{i-1}) sequences
    widths[:, 1:] = np.cumprod(kmat[:, :-1], axis=1)
    used = np.arange(kmat.shape[1])[None, :] < depth[:, None]
    level_s = lat.parts(step.draft_parts[0], widths, np.arange(kmat.shape[1])[None, :])
    return _parts(step, tokens, depth, frame["tree_tokens"].to_numpy(float) + 1.0, (level_s * used).sum(axis=1))


def _score_cape(profile, base, frame, lat, acc):
    """costmodel.cape: E = 1 + hS sum_i h1^(i-1); verify 1 + gamma E[S[bin]]."""
    from costmodel.cape import cape_expected_tokens, cape_verify_tokens

    gamma = frame["gamma"].to_numpy(np.int64)
    bins = np.asarray(list(frame["bins"]), dtype=np.int64)
    conf = acc.conf_bins
    topk = {int(k): v for k, v in conf.topk_hit.items()}
    step = _template(profile, "cape", {**base, "gamma": 1, "bins": [1] * 11})
    tokens = cape_expected_tokens(bins, conf.freq, topk, gamma)
    verify = 1.0 + cape_verify_tokens(bins, conf.freq, gamma)
    return _parts(step, tokens, gamma, verify, _chain(lat, step.draft_parts[0], gamma))


def _score_lookahead(profile, base, frame, lat, acc):
    """costmodel.lookahead Eq. 7: S = (f - 1 + E) / f, one forward of (W + G)(N - 1) + 1 tokens."""
    from costmodel.lookahead import compression_ratio

    la = acc.lookahead
    n, w, g = (frame[c].to_numpy(np.int64) for c in ("N", "W", "G"))
    step = _template(profile, "lookahead", {**base, "W": 1, "N": 2, "G": 1})
    tokens = compression_ratio(la.alpha, la.f, n, w, g)
    return _parts(step, tokens, np.zeros(len(frame)), frame["tokens_per_forward"].to_numpy(float), np.zeros(len(frame)))


def _score_kangaroo(profile, base, frame, lat, acc):
    """costmodel.kangaroo.early_exit where confidence bins are recorded; else (eta = 0) a chain of
    per-position acceptance. Draft forward i (shallow layers + adapter) is paid when drafting got there."""
    from costmodel.kangaroo import early_exit
    from costmodel.leviathan import expected_tokens_by_position

    gamma = frame["gamma"].to_numpy(np.int64)
    eta = frame["eta"].to_numpy(float)
    tokens = np.empty(len(frame))
    drafted = gamma.astype(float)
    reach = np.ones((len(frame), int(gamma.max())))
    chain = eta <= 0
    if chain.any():
        tokens[chain] = expected_tokens_by_position(acc.beta(int(gamma.max())), gamma[chain])
    if (~chain).any():
        conf = acc.conf_bins
        from costmodel.kangaroo import continue_probability
        steps, cr = early_exit(conf.freq, conf.hit(1), eta[~chain][:, None], gamma[~chain][:, None])
        tokens[~chain], drafted[~chain] = cr[:, 0], steps[:, 0]
        c = (conf.freq * continue_probability(eta[~chain])).sum(axis=-1)      # P(drafting goes on)
        reach[~chain] = c[:, None] ** np.arange(reach.shape[1])[None, :]
    layers = frame["exit_layer"].to_numpy(np.int64)
    draft_s = np.empty(len(frame))
    verify_scale = np.empty(len(frame))
    for layer in np.unique(layers):
        rows = layers == layer
        step = _template(profile, "kangaroo", {**base, "gamma": 1, "eta": 0.0, "exit_layer": int(layer)})
        draft_s[rows] = _chain(lat, step.draft_parts[0], gamma[rows], reach[rows])
        verify_scale[rows] = step.verify_scale
    out = _parts(step, tokens, drafted, drafted + 1.0, draft_s)
    out["verify_scale"] = verify_scale
    return out


def _score_coral(profile, base, frame, lat, acc):
    """Chain of the feature drafter (costmodel.leviathan per-position form); a router of N groups,
    top-n active runs n/N of the head and scales each token's acceptance by its recall (CORAL)."""
    from costmodel.leviathan import expected_tokens_by_position

    gamma = frame["gamma"].to_numpy(np.int64)
    groups = frame["groups"].to_numpy(np.int64)
    top_n = frame["top_n"].to_numpy(np.int64)
    tokens = np.empty(len(frame))
    draft_s = np.empty(len(frame))
    recalls = acc.extra.get("router_recall") or {}
    step = None
    built_in = frame["router_built_in"].to_numpy(bool)
    groups = np.where(built_in, 0, groups)     # the drafter's own head already routes: nothing to add
    for pair in sorted(set(zip(groups.tolist(), top_n.tolist()))):
        rows = (groups == pair[0]) & (top_n == pair[1])
        router = {"groups": pair[0], "top_n": pair[1], "router_recall": recalls[f"{pair[0]}/{pair[1]}"]} if pair[0] else {}
        step = _template(profile, "coral", {**base, "gamma": 1, **router})
        recall = router.get("router_recall", 1.0)
        tokens[rows] = expected_tokens_by_position(np.clip(acc.beta(int(gamma.max())) * recall, 0, 1), gamma[rows])
        draft_s[rows] = _chain(lat, step.draft_parts[0], gamma[rows])
    return _parts(step, tokens, gamma, gamma + 1.0, draft_s)


SCORERS: dict[str, Callable] = {
    "sd": _score_sd,
    "mcsd": _score_mcsd,
    "cape": _score_cape,
    "lookahead": _score_lookahead,
    "kangaroo": _score_kangaroo,
    "coral": _score_coral,
}
