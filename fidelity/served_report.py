"""The served-load report (`python -m experiments.serve_load`): report.md, each load's metrics predicted
beside measured, their errors against targets and the KV memory each method held."""
from __future__ import annotations

import pandas as pd

from fidelity.served import BOOTSTRAP_DRAWS, METRICS, PER_REQUEST, requests_to_resolve
from sweep.markdown import md_table

TARGETS = {"throughput_tok_s": 0.05, "tpot_s_p50": 0.05, "ttft_s_p90": 0.10, "tpot_s_p90": 0.10}
SPREAD_NOTE = (f"spread: the measured quantile's relative standard deviation over {BOOTSTRAP_DRAWS:,} resamples of "
               "the load's completed requests (`fidelity.served.request_spread`); an error within twice it is one "
               "the load cannot tell from which requests it held, and a target tighter than twice it needs more "
               "requests.")


def served_report(table: pd.DataFrame, args, profile, plain_capacity: float, minutes: float, note: str = "",
                  costs: pd.DataFrame | None = None) -> str:
    """report.md of a served run; `note` (a re-prediction's provenance) goes under the title; `costs`
    (`fidelity.served.step_costs`) says where the time goes."""
    shown = ["load", "rate", "candidate"] + [f"{m}_{s}" for m in METRICS for s in ("predicted", "measured")]
    errors = ["load", "candidate"] + [f"{m}_rel_error" for m in METRICS]
    spreads = ["load", "candidate"] + [f"{m}_spread" for m in PER_REQUEST]
    memory = ["load", "candidate", "kv_held_tokens_mean", "kv_held_tokens_max", "kv_held_mib_max",
              "kv_allocated_mib_max", "preemptions_measured", "preemptions_predicted"]
    met = [_against(table, metric, limit, int(args.requests)) for metric, limit in TARGETS.items()]
    lines = ["# Served load: predicted by the simulator, then served by the batch engine", "",
             *([note, ""] if note else []),
             f"- Profile: `{args.profile}` ({profile.name}); held-out prompts {args.prompts}",
             f"- {args.requests} requests a load (output lengths {args.output_lens}, seed {args.seed}), max batch "
             f"{args.max_batch}, KV budget {args.kv_tokens} tokens, {args.threads} thread(s); plain decoding's predicted "
             f"capacity {plain_capacity:.3f} requests/s" + (f"; served in {minutes:.1f} min" if minutes == minutes else ""),
             f"- {'Served by' if note else 'Command'}: `python -m experiments.serve_load {' '.join(args.argv)}`", "", "## Against the targets", "",
             *met, "", SPREAD_NOTE, "",
             "## Predicted and measured", "", md_table(table, [c for c in shown if c in table], ".3f"), "",
             "## Relative error (predicted / measured - 1)", "", md_table(table, errors, ".3f"), "",
             *(["## Spread of the measured quantiles over the load's requests", "", md_table(table, spreads, ".3f"), ""]
               if all(c in table for c in spreads) else []),
             "## KV memory each method held", "", md_table(table, [c for c in memory if c in table], ".1f"), "",
             "kv_held: every running row's context plus its reserved slots (the widest tree it may verify, as vLLM "
             "reserves lookahead slots), target and drafter KV; kv_allocated: what this engine's padded caches "
             "allocate (every row at the longest row's capacity)."]
    if costs is not None and not costs.empty:
        lines += ["", "## Where the time goes: steps simulated against measured", "",
                  md_table(costs, ["load", "candidate", "what", "n_predicted", "n_measured", "seconds_predicted",
                                   "seconds_measured", "rel_error"], ".3f"), "",
                  "Decode steps: the median over the steps that ran that many rows (the simulator's first seed); "
                  "prefill: every admitted request's prefill seconds over the requests admitted."]
    return "\n".join(lines) + "\n"


def _against(table: pd.DataFrame, metric: str, limit: float, requests: int) -> str:
    """One target's line: how many (rate, configuration) meet it, the worst, and where the measured
    quantile has a spread, how many lie within twice it and the requests a load needs to judge the target."""
    error = table[f"{metric}_rel_error"].abs()
    line = (f"- {metric}: |error| <= {100 * limit:.0f}% at {int((error <= limit).sum())}/{len(table)} "
            f"(rate, configuration); worst {100 * error.max():.1f}%")
    if f"{metric}_spread" not in table:
        return line
    spread = float(table[f"{metric}_spread"].median())
    return (line + f"; within 2x its spread at {int(table[f'{metric}_within_2x_spread'].sum())}/{len(table)} "
            f"(median spread {100 * spread:.1f}%: a load of about {requests_to_resolve(spread, requests, limit):.0f} "
            f"requests resolves {100 * limit:.0f}%)")
