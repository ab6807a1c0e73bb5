"""Configurations per second of the vectorised closed forms (Leviathan speedup, multi-sequence Eq. 5).

    python -m experiments.bench.costmodel [--n 1000000] [--repeats 7]

Each evaluation covers n random configurations (alpha, gamma, c / alpha, gamma, b) drawn with a
fixed seed; one warm-up call, then `repeats` timed calls, and the median time gives the rate.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from costmodel import leviathan, multiseq
from common.errors import InputError
from common.cli import CliParser, cli_entry


def _rate(fn, n: int, repeats: int) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return n / median, median


def run(n: int, repeats: int, seed: int) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(seed)
    alpha = rng.random(n)
    gamma = rng.integers(1, 13, n)
    cost = rng.random(n) * 0.5
    b = rng.integers(1, 33, n)
    cases = [
        ("leviathan.speedup (alpha, gamma, c)", lambda: leviathan.speedup(alpha, gamma, cost)),
        ("multiseq Eq. 5 (alpha, gamma, b)", lambda: multiseq.expected_tokens_multiseq(alpha, gamma, b)),
    ]
    return [(name, *_rate(fn, n, repeats)) for name, fn in cases]


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m experiments.bench.costmodel", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="configurations per evaluation (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats after one warm-up (median reported)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random configurations (default 0)")
    args = parser.parse_args(argv)
    if args.n < 1 or args.repeats < 1:
        raise InputError("--n and --repeats must be >= 1")
    print(f"{'closed form':40s} {'configs/s':>14s} {'median s':>10s}   (n = {args.n}, {args.repeats} repeats)")
    for name, rate, median in run(args.n, args.repeats, args.seed):
        print(f"{name:40s} {rate:14.3e} {median:10.4f}   {'meets' if rate >= 1e6 else 'below'} 1e6/s goal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
