"""What a sweep will cost before it builds anything: configurations and memory per (profile, method).

The counts come from each method's own `space_size` (methods.spec; MCSD counts its trees per
running product instead of enumerating them), so the estimate and the space cannot disagree on
the rules. Memory is bytes per row measured on a small sample of the same space, built and scored
by the sweep's own code (`space`, `experiments.sweep.scoring.score_task`), times the rows. At its peak
the sweep holds every space chunk and PEAK_COPIES scored copies of each row (the scored chunks,
their ranked concatenation, the plain copy written as parquet); with --batch-sizes beyond
--batch, one more scored copy per batch is alive while it is served.

A sweep whose estimate exceeds the memory available (psutil) is refused in one line before any
space is built.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import pandas as pd

import methods
from calibrate.profile import Profile
from common.errors import InputError
from experiments.sweep import scoring

SAMPLE_ROWS = 2_000      # rows of the sample that are scored
PEAK_COPIES = 3          # scored copies of a row alive at the peak (see the module docstring)


@dataclass
class Estimate:
    table: pd.DataFrame      # profile, method, setups, configurations, bytes
    base_bytes: int          # this process before the sweep (interpreter, libraries, profiles)

    @property
    def configurations(self) -> int:
        return int(self.table["configurations"].sum()) if len(self.table) else 0

    @property
    def bytes(self) -> int:
        return self.base_bytes + (int(self.table["bytes"].sum()) if len(self.table) else 0)

    def describe(self) -> str:
        """Per (profile, method) lines and the total, for stderr."""
        lines = [f"  {r.profile} / {r.method}: {r.configurations:,} configurations on {r.setups} setup(s), "
                 f"~{_gb(r.bytes)}" for r in self.table.itertuples()]
        return "\n".join(["estimate before building:", *lines,
                          f"  total: {self.configurations:,} configurations, ~{_gb(self.bytes)} at the peak"])


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


def available_memory() -> int:
    """Bytes the system can still give this process (psutil: free + reclaimable page cache)."""
    import psutil

    return int(psutil.virtual_memory().available)


def _process_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def estimate(profiles: list[Profile], opts, space: Callable, setting: Callable) -> Estimate:
    """Configurations and peak bytes of sweeping `profiles` with `opts` (a SweepOptions), without
    building any space larger than the sample. `space(spec, setup, opts)` and `setting(profile,
    opts)` are the sweep's own."""
    extra_batches = len([b for b in (opts.batch_sizes or []) if b != opts.batch])
    copies = PEAK_COPIES + extra_batches
    declared = methods.space_options()          # each option at its sample value: a small space of the same kind
    sample_opts = dataclasses.replace(opts, space={k: min(v, declared[k].sample or v) for k, v in opts.space.items()})
    rows = []
    per_row: dict[str, tuple[float, float]] = {}       # method -> (space bytes, scored bytes) per row
    for profile in profiles:
        scored_setting = setting(profile, opts)
        for method in opts.methods:
            spec = methods.get(method)
            try:
                found = scoring.setups(profile, method, scored_setting)
            except InputError:
                continue                      # the sweep lists it as not scored
            takes = space_options(spec, opts)
            count = sum(spec.space_size(setup, **takes) for setup in found)
            if method not in per_row:
                per_row[method] = _bytes_per_row(profile, spec, found[0], sample_opts, space, scored_setting)
            space_b, scored_b = per_row[method]
            rows.append({"profile": profile.name, "method": method, "setups": len(found), "configurations": count,
                         "bytes": int(count * (space_b + copies * scored_b))})
    table = pd.DataFrame(rows, columns=["profile", "method", "setups", "configurations", "bytes"])
    return Estimate(table=table, base_bytes=_process_bytes())


def space_options(spec, opts) -> dict:
    """The sweep options a method's `space` (and `space_size`) takes: those it declares (`spec.options`)."""
    return {k: opts.space[k] for k in spec.options}


def _bytes_per_row(profile: Profile, spec, setup, sample_opts, space: Callable, setting) -> tuple[float, float]:
    """Bytes per row of a small space and of its scored table, measured on the real code's output."""
    sample = space(spec, setup, sample_opts)
    if sample.empty:
        return 0.0, 0.0
    sample = sample.iloc[:SAMPLE_ROWS].reset_index(drop=True)
    scored = scoring.score_task(scoring.ScoreTask(profile.to_dict(), spec.name, setup.base, sample, setting))
    return (sample.memory_usage(deep=True).sum() / len(sample), scored.memory_usage(deep=True).sum() / len(scored))


def check_fits(est: Estimate, space: dict[str, int], available: int | None = None) -> None:
    """InputError (one line: the estimate and the limit) when the sweep will not fit in memory."""
    limit = available_memory() if available is None else available
    if est.bytes > limit:
        where = ""
        if len(est.table):
            worst = est.table.sort_values("bytes", ascending=False).iloc[0]
            where = f"; largest: {worst.profile} / {worst.method} {int(worst.configurations):,} configurations"
        given = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in space.items())
        raise InputError(f"{given}: the sweep would hold {est.configurations:,} configurations, "
                         f"~{_gb(est.bytes)} at its peak, but {_gb(limit)} of memory is available{where}; "
                         f"lower {', '.join('--' + k.replace('_', '-') for k in space)}, or pass fewer --methods / "
                         "--profile")
