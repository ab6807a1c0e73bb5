"""Prompt lookup replayed from a greedy output gives the engine's own steps."""
import pytest

import methods
from common.errors import InputError
from runtime.engine import make_decoder
from runtime.models import tiny_model
from traces.lookup_replay import lookup_steps, replayed_steps

PROMPT = [5, 9, 2, 7, 5, 9, 2, 7, 3, 5, 9, 2, 11, 4, 5, 9]


@pytest.mark.parametrize("label", ["prompt_lookup g4 nmin1 nmax3", "prompt_lookup g2 nmin2 nmax2",
                                   "prompt_lookup g6 nmin1 nmax1"])
@pytest.mark.parametrize("seed", [0, 3])
def test_replay_gives_the_engines_steps(label, seed):
    config = methods.parse_label(label)
    out = make_decoder("prompt_lookup", tiny_model(seed), None, **config.to_dict()).generate(PROMPT, 40)
    engine = [(s.verify_tokens, s.accepted) for s in out.steps]
    assert sum(a for _, a in engine) == len(out.tokens) == 40
    assert any(v > 1 for v, _ in engine)                      # the test exercises matches
    assert lookup_steps(PROMPT, out.tokens, config) == engine


def test_replayed_rows_count_context_and_refuse_unknown_prompts():
    config = methods.parse_label("prompt_lookup g3 nmin1 nmax2")
    output = [2, 7, 8, 8, 5, 9]
    frame = replayed_steps({"p": PROMPT}, {"p": output}, [config])
    assert frame["accepted"].sum() == len(output) and frame["step"].tolist() == list(range(len(frame)))
    assert frame["ctx_len"].iloc[0] == len(PROMPT) and (frame["method"] == "prompt_lookup").all()
    assert lookup_steps(PROMPT, output, config)[0] == (4, 3)   # "5 9" -> "2 7 5" proposed, "2 7" hit, "8" the bonus
    with pytest.raises(InputError, match="no prompt tokens for the outputs of q"):
        replayed_steps({"p": PROMPT}, {"q": output}, [config])
    first = lookup_steps(PROMPT, output, config)[0][1]
    later = replayed_steps({"p": PROMPT}, {"p": output}, [config], drop_first_step=True)
    assert later["step"].tolist() == list(range(len(frame) - 1)) and later["accepted"].sum() == len(output) - first
    assert later["ctx_len"].iloc[0] == len(PROMPT) + first
