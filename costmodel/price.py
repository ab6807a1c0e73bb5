"""Serving cost in money: USD per million generated tokens at a GPU-hour price, one formula and one
check for every report that prices a deployment (capacity planning, the vLLM-on-H100 answer)."""
from __future__ import annotations

import math

from common.errors import InputError

DEFAULT_GPU_HOUR_PRICE = 2.50      # USD per GPU-hour, the commands' default


def check_gpu_hour_price(price) -> float:
    """The price as a float; InputError unless a finite number > 0 (nan and inf refused)."""
    try:
        value = float(price)
    except (TypeError, ValueError):
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise InputError(f"--gpu-hour-price must be > 0 USD per GPU-hour, got {price!r}")
    return value


def usd_per_million_tokens(gpus: float, tokens_per_s: float, gpu_hour_price: float) -> float:
    """What `gpus` GPUs cost per million tokens they generate at `tokens_per_s` (nan when none)."""
    if not tokens_per_s > 0:
        return math.nan
    return gpus * check_gpu_hour_price(gpu_hour_price) / (tokens_per_s * 3600.0) * 1e6
