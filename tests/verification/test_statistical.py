"""Statistical mode: sample-size helpers, a user's own sampler through the API, the batched rule at 32k."""
import math
from fractions import Fraction as F

import numpy as np
import pytest

from common.errors import InputError
from verification import exact, statistical
from verification.cases import PositionCase


def test_sample_size_and_detectable_tv_are_inverse():
    n = statistical.samples_needed(1000, 0.01, 1e-6, 1e-6)
    assert 1_000_000 < n < 2_000_000
    assert math.isclose(statistical.detectable_tv(n, 1000, 1e-6, 1e-6), 0.01, rel_tol=1e-3)
    assert statistical.samples_needed(10, 0.05, 1e-3, 1e-3) < statistical.samples_needed(10, 0.02, 1e-3, 1e-3)
    with pytest.raises(InputError, match="alpha is 0"):
        statistical.samples_needed(10, 0.1, 0, 0.1)


def test_pooling_reads_expected_counts_only():
    group = statistical.pool_by_expected(np.array([100.0, 1.0, 2.0, 3.0, 50.0]))
    assert group[1] == group[2] == group[3] and len(set(group)) == 3


def my_inverse_cdf_sd(case, rng):
    """A user's speculative sampler written from scratch: its own inverse CDF on raw uniforms."""
    def draw(weights):
        u, acc = rng.uniform(), 0
        total = sum(weights)
        for i, w in enumerate(weights):
            acc += w
            if u * total < acc:
                return i
        return len(weights) - 1
    x = draw(case.q)
    if rng.uniform() < case.p[x] / case.q[x]:
        return x, True
    return draw([max(a - b, 0) for a, b in zip(case.p, case.q)]), False


def my_broken_sd(case, rng):
    token, accepted = my_inverse_cdf_sd(case, rng)
    return (token, accepted) if accepted else (int(np.argmax(case.p)), False)  # "correction" is greedy


def test_a_sampler_the_verifier_has_never_seen():
    case = PositionCase((F(1, 2), F(1, 4), F(1, 4), F(0)), (F(1, 8), F(1, 8), F(1, 4), F(1, 2)))
    target = case.target()
    assert exact.exact_check(lambda c, r: my_inverse_cdf_sd(c, r)[0], case, target).passed
    broken = exact.exact_check(lambda c, r: my_broken_sd(c, r)[0], case, target)
    assert not broken.passed and broken.tv > 0
    accept = float(sum(min(a, b) for a, b in zip(case.p, case.q)))
    law = [float(case.p[i]) for i in range(4)]
    good = statistical.statistical_check(my_inverse_cdf_sd, case, law, alpha=1e-3, beta=1e-3, delta=0.1,
                                         accept_rate=accept, seed=1)
    assert good.passed and good.tv_bound < 0.2, good
    bad = statistical.statistical_check(my_broken_sd, case, law, alpha=1e-3, beta=1e-3, delta=0.1,
                                        accept_rate=accept, seed=1)
    assert not bad.passed
    two = statistical.statistical_check(lambda c, r: my_inverse_cdf_sd(c, r)[0], case,
                                        reference=lambda c, r: my_broken_sd(c, r)[0], alpha=1e-3, beta=1e-3, delta=0.1)
    assert not two.passed
    support = statistical.statistical_check(lambda c, r: 3, case, law, n=10)
    assert not support.passed and support.reason.startswith("support")


@pytest.mark.slow
def test_batched_rule_at_vocab_32000_seeded():
    """rules_torch.mcss without replacement at 32k tokens passes; the q-not-updated mutant, on a case
    where its exact TV is >= MUTANT_MIN_TV, is caught with the same sample size. delta = 0.1 keeps it
    to ~41k samples (~1 minute of one core: every sample runs the rule over 32k-token rows)."""
    from verification import batched

    rule = batched.RULE_CHECKS["mcss_without"]
    case, _ = rule.build(32_000, 5)
    result = statistical.statistical_check(rule.sampler, case, case.target(), alpha=1e-3, beta=1e-3, delta=0.1,
                                           batched=True, seed=5, tests=2)
    assert result.passed, result
    mutant = batched.MUTANT_CHECKS["q_not_updated"]
    mcase, true_tv = mutant.build(32_000, 5, batched.MUTANT_MIN_TV)
    caught = statistical.statistical_check(mutant.sampler, mcase, mcase.target(), alpha=1e-3, beta=1e-3, delta=0.1,
                                           batched=True, seed=5, n=result.n, tests=2)
    assert true_tv > statistical.detectable_tv(result.n, caught.cells, 1e-3 / 2, 1e-3) and not caught.passed
