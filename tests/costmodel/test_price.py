"""USD per million tokens: the one formula and the one price check both deployment reports use."""
import math

import pytest

from common.errors import InputError
from costmodel.price import check_gpu_hour_price, usd_per_million_tokens


def test_cost_per_million_tokens():
    # 1 GPU at 3.6 USD/h generating 1000 tok/s: 3.6 M tokens an hour, 1 USD per million
    assert usd_per_million_tokens(1, 1000.0, 3.6) == pytest.approx(1.0)
    assert usd_per_million_tokens(4, 1000.0, 3.6) == pytest.approx(4.0)
    assert usd_per_million_tokens(2, 4000.0, 3.6) == pytest.approx(0.5)
    assert math.isnan(usd_per_million_tokens(1, 0.0, 3.6))


@pytest.mark.parametrize("price", [0, -1, math.nan, math.inf, "x"])
def test_a_price_that_is_not_positive_and_finite_is_refused(price):
    with pytest.raises(InputError, match=r"^--gpu-hour-price must be > 0 USD per GPU-hour, got "):
        check_gpu_hour_price(price)
