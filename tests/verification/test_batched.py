"""Statistical mode's batched samplers: exact laws of the mutants agree with exact mode on small
siblings, the fast mutant samplers draw from those laws, the batched rules pass and the mutants fail."""
from fractions import Fraction as F

import numpy as np

from verification import batched, laws, statistical
from verification.cases import PositionCase, RULES, random_position_case
from verification.exact import exact_law
from verification.mutants import MUTANTS

LAW_OF = {  # name -> keyword arguments of laws.position_law that state the sampler's algorithm
    "single_draft": {}, "mcss_with": {}, "mcss_without": dict(draft_replacement=False, verify_replacement=False),
    "q_not_updated": dict(draft_replacement=False), "residual_unnormalised": dict(update="unnormalised"),
    "tokenwise_residual": dict(update="tokenwise"), "argmax_draft": dict(candidates="argmax"),
    "topk_draft_raw_q": dict(candidates="top2"),
}


def _law(name, case):
    kw = dict(LAW_OF[name])
    q = np.array([float(x) for x in case.q])
    k = 1 if name in ("single_draft", "argmax_draft", "topk_draft_raw_q") else case.k
    draw = batched._candidate_law(q, kw.pop("candidates", "q"))
    return laws.position_law(np.array([float(x) for x in case.p]), q, k, draw=draw, **kw)


def test_position_laws_equal_exact_mode_on_small_cases():
    rng = np.random.default_rng(4)
    cases = [random_position_case(rng, int(rng.integers(2, 6)), int(rng.integers(1, 4))) for _ in range(30)]
    cases.append(PositionCase((F(1, 2), F(1, 4), F(1, 4)), (F(1, 4), F(1, 4), F(1, 2)), 2))
    for name in LAW_OF:
        sampler = (RULES if name in RULES else MUTANTS)[name].sampler
        for case in cases:
            if name in ("q_not_updated", "mcss_without") and case.k > sum(x > 0 for x in case.q):
                continue  # fewer candidates than q's support: outside what position_law enumerates
            want = exact_law(sampler, case)[0]
            vec = np.zeros(case.vocab)
            for token, mass in want.items():
                vec[token] = float(mass)
            assert laws.tv(_law(name, case), vec) < 1e-12, (name, case)


def test_fast_mutants_draw_from_their_exact_laws_and_rules_from_p():
    for name, check in {**batched.RULE_CHECKS, **batched.MUTANT_CHECKS}.items():
        case, true_tv = check.build(60, 3, batched.MUTANT_MIN_TV if name in batched.MUTANT_CHECKS else 0.0)
        assert (true_tv >= batched.MUTANT_MIN_TV) if name in batched.MUTANT_CHECKS else true_tv < 1e-9
        own = statistical.statistical_check(check.sampler, case, check.true_law(case), alpha=1e-4, beta=1e-3,
                                            delta=0.05, batched=True, seed=11, tests=11)
        assert own.passed, (name, own)
        vs_target = statistical.statistical_check(check.sampler, case, case.target(), alpha=1e-4, beta=1e-3,
                                                  delta=0.05, batched=True, seed=12, tests=11)
        assert vs_target.passed == (name in batched.RULE_CHECKS), (name, vs_target)


def test_row_sampler_never_draws_a_zero_weight_token():
    rows = batched.RowSampler(np.array([[0.0, 0.5, 0.5, 0.0], [0.25, 0.0, 0.0, 0.75]]))
    import torch
    u = torch.tensor([0.0, 0.4999, 0.5, 1 - 1e-16, 0.0, 0.25, 1 - 1e-16])
    r = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    assert rows.draw(u, r).tolist() == [1, 1, 2, 2, 0, 3, 3]
    cands = batched.draft(batched.RowSampler(np.array([0.7, 0.2, 0.1, 0.0])), 2000, 3, torch.Generator().manual_seed(0),
                          replacement=False)
    assert all(sorted(row) == [0, 1, 2] for row in cands.tolist())
