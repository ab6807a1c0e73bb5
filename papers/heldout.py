"""The bundled paper Profiles judged on what their fits did not see (the library behind the
"(bundled profiles)" sections of `python -m experiments.reproduce`).

Every published number a paper fit uses (`papers`: speedups with their tau, tau, latencies)
is predicted three ways, each row saying its role:
- "paper inputs" (calibration): the bundled Profile, fitted on every table, in sample;
- "leave one table out" (validation): refitted without the number's table;
- "leave one model size out" (validation): refitted without every number of its target model size,
  whose models are then priced from their architectures alone (`calibrate.transfer`'s route).
Beside them: the targets per paper and scheme, the warning lines the fits recorded
(a term on a bound of its physical range, a held-out error above target), the choice of the
acceptance curve family on the SmolLM2 TokenTraces (whole curves known), and the sweep's MCSD pick
against the paper's best configuration.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from papers.build import DEFAULT_OUT
from profiles.profile import Profile
from papers import calibration as paper_fit, MODELS
from papers.calibration import TARGETS, profile_warnings
from profiles.acceptance import AlphaCurve
from common.bundled import bundled
from papers.mcsd import TARGETS as MCSD_TARGETS
import papers
from sweep import scoring
from sweep.run import SweepOptions, setting_of, space_of
from methods.spec import Setup
import methods

MAIN = "paper inputs"
LOTO = "leave one table out"
LOMSO = "leave one model size out"
ROLES = {MAIN: "calibration (fitted on every table)", LOTO: "validation (its table held out)",
         LOMSO: "validation (its model size held out)"}
LABELS = {"glide": "GLIDE", "mcsd": "MCSD", "lookahead": "Lookahead", "kangaroo": "Kangaroo", "coral": "CORAL"}
KIND_WORDS = {"speedup": "speedups", "tau": "tau", "seconds": "latencies", "ratio": "latencies"}


def profile_section(paper: str, kind: str) -> str:
    return f"{LABELS[paper]} {KIND_WORDS[kind]} (bundled profiles)"


def _cell_row(cell, predicted: float, variant: str, held_out: str = "") -> dict:
    return dict(section=profile_section(cell.paper, cell.kind), paper=cell.paper, table=cell.table, row=cell.row,
                column=cell.column, published=float(cell.published), predicted=float(predicted),
                rel_error=float(predicted) / float(cell.published) - 1.0, variant=variant, role=ROLES[variant],
                assumption=cell.note, kind=cell.kind, size=cell.size, held_out=held_out)


def bundled_profiles() -> dict:
    return {p.stem: Profile.load(p) for p in sorted(DEFAULT_OUT.glob("*.json"))}


def profile_rows(profiles: dict | None = None) -> list[dict]:
    """Every cell of every paper fit: in sample from the bundled Profiles, then left out by table and by
    target model size (`papers.calibration.leave_one_out`)."""
    profiles = bundled_profiles() if profiles is None else profiles
    out = []
    for paper, model in MODELS.items():
        cells = model.cells()
        out += [_cell_row(c, p, MAIN) for c, p in zip(cells, paper_fit.predict(cells, profiles))]
        for by, variant in (("table", LOTO), ("size", LOMSO)):
            held = {(r["table"], r["row"], r["column"], r["kind"]): r for r in paper_fit.leave_one_out(model, by)}
            out += [_cell_row(c, held[key]["predicted"], variant, held[key]["held_out"])
                    for c in cells if (key := (c.table, c.row, c.column, c.kind)) in held]
    return out


def held_out_summary(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Per paper, scheme, kind of number and held-out group: its cells predicted by a fit that never saw them."""
    held = comparisons[comparisons["variant"].isin([LOTO, LOMSO])]
    rows = []
    for (paper, variant, kind, group), grp in held.groupby(["paper", "variant", "kind", "held_out"], sort=False):
        err = grp["rel_error"].abs()
        worst = grp.loc[err.idxmax()]
        rows.append(dict(paper=paper, scheme=variant, kind=kind, held_out=group, n=len(grp),
                         calibration="the other " + ("tables" if variant == LOTO else "model sizes"),
                         median_abs_err=err.median(), worst_abs_err=err.max(),
                         worst_row=f"{worst['row']} | {worst['column']}"))
    return pd.DataFrame(rows)


def targets(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Per paper, scheme and kind (speedup, tau): median and worst |error| against the targets the project set."""
    rows = []
    for (paper, variant, kind), grp in comparisons.groupby(["paper", "variant", "kind"], sort=False):
        if kind not in TARGETS:
            continue
        err = grp["rel_error"].abs()
        median, worst = TARGETS[kind]
        rows.append(dict(paper=paper, kind=kind, scheme=variant, role=ROLES[variant], n=len(grp),
                         median_abs_err=err.median(), worst_abs_err=err.max(), target=f"{median:.1%} / {worst:.0%}",
                         met="yes" if err.median() <= median and err.max() <= worst else "no"))
    return pd.DataFrame(rows)


def warning_lines(profiles: dict | None = None) -> list[str]:
    """Each paper fit's warning and note lines, once per paper."""
    profiles = bundled_profiles() if profiles is None else profiles
    return list(dict.fromkeys(w for p in profiles.values() for w in profile_warnings(p)))


# ---- the acceptance curve's family, chosen where the whole curve is known -----------------------------

def _fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    slope = np.polyfit(x, y, 1)[0] if x.size >= 2 else 0.0
    return float(slope), float(y[-1])


def _family_predict(family: str, table: dict[int, float], k: int) -> float:
    """alpha@k read from `table` (the other k) by `family`: "logit-log" is profiles.acceptance's own
    curve; the rest are the alternatives it was chosen over."""
    ks = np.array(sorted(table), float)
    a = np.array([table[int(j)] for j in ks])
    if family == "logit-log (chosen)":
        return float(AlphaCurve.of(table)(k))
    if family == "flat past the last k (the old Profiles)":
        return float(np.interp(np.log2(k), np.log2(ks), a))
    eps = 1e-6
    transform = {"power law of the miss": (lambda p: np.log(np.clip(1 - p, eps, 1)), lambda y: 1 - np.exp(y)),
                 "power law of alpha": (lambda p: np.log(np.clip(p, eps, 1)), lambda y: np.exp(y)),
                 "linear in log k": (lambda p: p, lambda y: y)}[family]
    y = transform[0](a)
    x = np.log(ks)
    if k > ks[-1]:
        slope, last = _fit_line(x, y)
        value = last + slope * (np.log(k) - x[-1])
    else:
        value = np.interp(np.log(k), x, y)
    return float(np.clip(transform[1](value), 0.0, 1.0))


FAMILIES = ("logit-log (chosen)", "power law of the miss", "power law of alpha", "linear in log k",
            "flat past the last k (the old Profiles)")


def acceptance_family_rows() -> pd.DataFrame:
    """Each bundled SmolLM2 TokenTrace's greedy alpha@k (k = 1..32, the whole curve from each token's
    draft rank): every k but the first read from the others by each family (inside: interpolated;
    past the last: extrapolated), and k = 8..32 from k = 1 and 4 alone (what MCSD's Table 7 gives)."""
    ks = (1, 2, 4, 8, 16, 32)
    rows = []
    for path in sorted(bundled("traces").glob("smollm2-cpu/tokens_*.parquet")):
        rank = pd.read_parquet(path, columns=["draft_rank"])["draft_rank"].to_numpy()
        table = {k: float(np.mean(rank < k)) for k in ks}
        for family in FAMILIES:
            loko = [_family_predict(family, {j: v for j, v in table.items() if j != k}, k) / table[k] - 1
                    for k in ks[1:]]
            two = [_family_predict(family, {1: table[1], 4: table[4]}, k) / table[k] - 1 for k in (8, 16, 32)]
            rows.append(dict(trace=path.name, family=family, role="validation (each k held out)",
                             loko_median=float(np.median(np.abs(loko))), loko_worst=float(np.max(np.abs(loko))),
                             from_k1_k4_median=float(np.median(np.abs(two))), from_k1_k4_worst=float(np.max(np.abs(two)))))
    return pd.DataFrame(rows)


# ---- the sweep's pick against the paper's best, priced by the model --------------------------------------

PICK_COLUMNS = ["setting", "profile", "paper_best", "published_speedup", "predicted_paper_best", "sweep_pick",
                "predicted_pick", "pick_vs_published", "paper_best_rank", "pick_gain", "why"]


def _mcsd_settings():
    """(profile stem, drafter, dataset, temperature, paper's config or None, published speedup, setting) of
    every MCSD setting whose best speedup the paper prints: Tables 2-3 "Ours" (configuration known) and
    Table 4's 13B rows (MCSS w/o replacement; their configuration is in the lost Appendix E)."""
    profile_of = {label: f"mcsd-{arch}-a6000" for arch, label in MCSD_TARGETS.items()}
    for table, draft, rec, config, target, dataset, temp in papers.mcsd_tau_rows():
        if rec.row.endswith("/ Ours"):
            yield (profile_of[target], draft.lower(), dataset.lower(), float(temp[2:]), config,
                   papers.value("mcsd", table, rec.row, "speedup"), f"Table {table}: {rec.row.rsplit(' / ', 1)[0]}")
    for target in ("LLaMA-13B", "Vicuna-13B"):
        yield (profile_of[target], "llama-68m", "alpaca", 1.0, None,
               papers.value("mcsd", "4", "MCSS w/o replacement", f"{target} speedup"),
               f"Table 4: LLaMA-68M / {target} / Alpaca / T=1")


def sweep_vs_paper(profiles: dict) -> pd.DataFrame:
    """Per MCSD setting with a published best speedup: the paper's best configuration and the sweep's
    pick, both priced by the bundled Profile as the sweep prices them (`sweep.scoring.score`
    on the sweep's default MCSD space, at the dataset's workload context, over generations of the
    paper's 128 new tokens), and the published speedup of the paper's best. `profiles`: {stem: Profile}."""

    spec = methods.get("mcsd")
    rows = []
    for stem, drafter, dataset, temp, config, published, setting in _mcsd_settings():
        profile = profiles[stem]
        new_tokens = profile.workload_new_tokens(dataset)
        opts = SweepOptions(methods=["mcsd"], temperature=temp, dataset=dataset, sim_tokens=new_tokens)
        key = f"{drafter}/{dataset}/T{temp:g}"
        setup = Setup(profile, drafter, key)
        scored = scoring.score(setup, "mcsd", space_of(spec, setup, opts), setting_of(profile, opts))
        scored = scored.sort_values("speedup", ascending=False).reset_index(drop=True)
        pick = scored.iloc[0]
        label = None if config is None else methods.parse_config("mcsd", {"k": config, "replacement": True}).label
        hit = scored.index[scored.config == label] if label else []
        paper = scored.loc[hit[0]] if len(hit) else None
        gain = None if paper is None else float(pick.speedup / paper.speedup - 1.0)
        if paper is None:
            why = "the paper's configuration is not printed (MCSD Appendix E is lost): the pick is judged on the " \
                  "published speedup alone"
        elif paper.config == pick.config:
            why = "same configuration"
        else:
            why = (f"the model prices the pick {gain:+.1%} over the paper's: {pick.tokens_per_step:.2f} tokens/step "
                   f"verifying {pick.verified_per_step:.0f} at draft cost {pick.draft_cost:.2f} against "
                   f"{paper.tokens_per_step:.2f} verifying {paper.verified_per_step:.0f} at {paper.draft_cost:.2f}")
        rows.append(dict(setting=setting, profile=stem, paper_best=label or "(not printed)", published_speedup=published,
                         predicted_paper_best=None if paper is None else float(paper.speedup),
                         sweep_pick=pick.config, predicted_pick=float(pick.speedup),
                         pick_vs_published=float(pick.speedup / published - 1.0),
                         paper_best_rank=int(hit[0]) + 1 if len(hit) else None, pick_gain=gain, why=why))
    return pd.DataFrame(rows, columns=PICK_COLUMNS)
