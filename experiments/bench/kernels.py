"""One target forward per query width, with and without the few-row CPU path of `runtime.linear`.

    python -m experiments.bench.kernels [--model smollm2] [--widths 1,2,3,4,5,6,8,12,16] [--repeats 9]

Why it matters: speculative decoding pays when verifying a few drafted tokens costs about what
decoding one does. Each row is one forward of `--width` new tokens after a `--context`-token prefix,
timed with both paths interleaved (width by width, path by path, after one warm-up round); the
figures are medians over `--repeats` rounds with their interquartile range, and each width's cost
relative to one token on the same path.
"""
from __future__ import annotations

import statistics
import time

import torch

from common.cli import CliParser, cli_entry
from common.errors import InputError
from runtime.linear import SKINNY_ROWS, use_skinny
from runtime.models import load_model
from traces.timing import int_list


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return q[0], statistics.median(values), q[2]


def bench(model_spec: str, widths: list[int], repeats: int, context: int, threads: int) -> dict:
    """{(width, skinny): [seconds per round]} for one forward of `width` tokens after `context`."""
    torch.set_num_threads(threads)
    model = load_model(model_spec).model
    ids = torch.arange(100, 100 + context + max(widths))[None] % model.config.vocab_size
    cache = model.new_cache(capacity=context + max(widths) + 8)
    with torch.no_grad():
        model(ids[:, :context], cache, logits=False)

    def once(width: int) -> float:
        cache.crop(context)
        with torch.no_grad():
            start = time.perf_counter()
            model(ids[:, context:context + width], cache)
            return time.perf_counter() - start

    times: dict[tuple[int, bool], list[float]] = {}
    for round_ in range(repeats + 1):           # round 0 warms up
        for width in widths:
            for skinny in (False, True):
                with use_skinny(skinny):
                    seconds = once(width)
                if round_:
                    times.setdefault((width, skinny), []).append(seconds)
    return times


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m experiments.bench.kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="model spec as runtime.models.load_model takes it "
                        "(default smollm2; random:<architecture> times a registry shape with random weights)")
    parser.add_argument("--widths", default="1,2,3,4,5,6,8,12,16", help="query widths (default 1,2,3,4,5,6,8,12,16)")
    parser.add_argument("--context", type=int, default=160, help="prefix tokens in the cache (default 160)")
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds after one warm-up (default 9)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2, the project's CPU)")
    args = parser.parse_args(argv)
    widths = list(int_list(args.widths, "widths", 1))
    if args.repeats < 2 or args.context < 1 or args.threads < 1:
        raise InputError(f"--repeats must be >= 2 and --context, --threads >= 1, got {args.repeats}, "
                         f"{args.context}, {args.threads}")
    times = bench(args.model, widths, args.repeats, args.context, args.threads)
    base = {s: statistics.median(times[(widths[0], s)]) for s in (False, True)}
    print(f"{args.model}: one forward of W tokens after {args.context}, {args.threads} threads, median of "
          f"{args.repeats} interleaved rounds [interquartile range]; x = cost over width {widths[0]} on the same path; "
          f"runtime.linear takes the few-row path up to {SKINNY_ROWS} rows")
    print(f"{'W':>3s}  {'F.linear ms':>22s} {'x':>5s}   {'few-row path ms':>22s} {'x':>5s}   {'gain':>5s}")
    for width in widths:
        cols = []
        for skinny in (False, True):
            lo, mid, hi = (v * 1e3 for v in _quartiles(times[(width, skinny)]))
            cols.append((f"{mid:7.1f} [{lo:6.1f}, {hi:6.1f}]", mid / (base[skinny] * 1e3)))
        gain = statistics.median(times[(width, False)]) / statistics.median(times[(width, True)])
        print(f"{width:3d}  {cols[0][0]:>22s} {cols[0][1]:5.2f}   {cols[1][0]:>22s} {cols[1][1]:5.2f}   {gain:5.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
