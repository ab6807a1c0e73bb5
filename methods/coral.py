"""coral: an EAGLE-style feature drafter (chain of gamma) with CORAL's optional LM-head router of
N groups, top-n active: the head runs n/N of its rows and each draft survives with the router's
recall (costmodel.coral). groups = 0: no router (or the drafter's own built-in one).

A drafter whose Profile entry states a tree (`"tree": {"depth": D, "candidates": C}`, EAGLE-2's
dynamic tree as the CORAL paper runs it) drafts C / D sequences per draft forward after the first and
verifies 1 + (C / D) x gamma tokens (C + 1 at gamma = D); without one a step is a chain.

The entry's optional `"engine_method"` says which head format the drafter's checkpoint is in, as the
engines name it: "eagle" (EAGLE-1/2, the default), "eagle3" (EAGLE-3) or "mtp" (the target's own
multi-token-prediction layers); exports use it (vLLM method eagle / eagle3 / mtp, SGLang EAGLE /
EAGLE3 / NEXTN) and never guess it."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from common.errors import InputError
from costmodel.step import DraftPart, StepShape, chain_width
from methods.config import Int, MethodConfig, param
from methods.engines import EngineConfig, drafter_checkpoint, sglang_requires, verified_tokens
from methods.sd import MAX_DEPTH, chain_sampler, chain_tokens, drafter_model, sd_vllm
from costmodel.params import drafter_arch
from methods.assumed import AssumedDrafter
from methods.spec import MethodSpec, PlotSpec, verdict

GROUPS = (4, 8, 16, 32, 64)
ROUTERS = ((16, 2), (32, 4))       # (groups, top-n) of the routed drafters the campaigns time
TOP_N = (1, 2, 3, 4, 6, 8)
DEPTHS = tuple(range(1, 9))
ENGINE_METHODS = {"eagle": ("eagle", "EAGLE"), "eagle3": ("eagle3", "EAGLE3"), "mtp": ("mtp", "NEXTN")}
EAGLE_TREE = {"depth": 6, "candidates": 60}      # EAGLE-2's dynamic tree as the CORAL paper runs it
EAGLE3_VOCAB = 32000                             # EAGLE-3 checkpoints' draft vocabulary


@dataclass(frozen=True)
class CORALConfig(MethodConfig):
    method = "coral"
    gamma: int = param(Int("g", "draft length", low=1, high=MAX_DEPTH), 4)
    groups: int = param(Int("N", "router groups (0: no router)", low=0, omit=0), 0)
    top_n: int = param(Int("top", "active router groups", low=0, omit=0), 0)

    def validate(self):
        if (self.groups == 0) != (self.top_n == 0):
            raise InputError("coral: 'groups' and 'top_n' are both 0 (no router) or both >= 1, "
                             f"got groups={self.groups}, top_n={self.top_n}")
        if self.top_n > self.groups:
            raise InputError(f"coral: top_n ({self.top_n}) exceeds groups ({self.groups})")


@dataclass(frozen=True)
class RouterRecall:
    """CORAL's part of an acceptance entry, `router_recall`: per (groups, top_n) router, the share of
    the drafter's accepted tokens that survive the router's top-n groups ("groups/top_n": recall)."""

    recalls: tuple[tuple[tuple[int, int], float], ...]

    @property
    def routers(self) -> set[tuple[int, int]]:
        return {router for router, _ in self.recalls}

    def to_dict(self) -> dict[str, float]:
        return {f"{g}/{t}": r for (g, t), r in self.recalls}


def recall_of(setup, groups: int, top_n: int) -> float:
    """The router's recall for (groups, top_n) from the acceptance entry (1 without a router)."""
    if not groups:
        return 1.0
    part = setup.acceptance.part("router_recall")
    value = dict(part.recalls).get((groups, top_n)) if part is not None else None
    if value is None:
        raise InputError(f"acceptance model '{setup.acceptance_key}' has no router_recall for "
                         f"'{groups}/{top_n}' (has: {', '.join(sorted(part.to_dict())) if part else 'none'})")
    return float(value)


def router_model(groups: int, top_n: int) -> str:
    """The name of an EAGLE drafter with CORAL's router (its latency rows are `<name>@<arch>`)."""
    return f"eagle-router{groups}:{top_n}"


def tree_width(setup) -> int:
    """Sequences per draft forward (after the first) and verified tokens per draft level: C / D of
    the drafter's stated tree, 1 (a chain) when it states none."""
    tree = setup.drafter_spec.tree
    if tree is None:
        return 1
    depth, candidates = tree.depth, tree.candidates
    if candidates < depth:
        raise InputError(f"drafter '{setup.drafter}': tree needs depth >= 1 and candidates >= depth, "
                         f"got depth={depth}, candidates={candidates}")
    return max(1, round(candidates / depth))


def engine_method(setup) -> tuple[str, str]:
    """(vLLM method, SGLang algorithm) of the drafter's checkpoint format (its `engine_method`)."""
    name = setup.drafter_spec.engine_method or "eagle"
    if name not in ENGINE_METHODS:
        raise InputError(f"drafter '{setup.drafter}': engine_method {name!r} is not one of "
                         f"{', '.join(ENGINE_METHODS)}")
    return ENGINE_METHODS[name]


def tree_note(setup, config) -> str:
    """What a chain export drops of a drafter that states a tree (the Profile's acceptance is the tree's)."""
    tree = setup.drafter_spec.tree
    if tree is None:
        return ""
    width = tree_width(setup)
    return (f"the Profile's drafter drafts a tree ({tree.candidates} candidates over {tree.depth} levels, "
            f"{width} a level) and its acceptance was measured on that tree: this chain verifies "
            f"{config.gamma + 1} tokens a step, not {width * config.gamma + 1}, and accepts fewer per step "
            "than the tree; it is priced as a chain on the tree's acceptance, an upper bound")


def chain_twin(setup):
    """The setup of a tree drafter drafting a chain (an engine that runs chains), on the tree's
    acceptance entry: its chain-equivalent alpha overstates a chain's, so what it prices is an upper
    bound; None where the drafter states no tree (the chain is what was priced)."""
    if setup.drafter is None or setup.drafter_spec.tree is None:
        return None
    profile, twin = setup.profile.with_chain_twin(setup.drafter)
    return replace(setup, profile=profile, drafter=twin)


class CORAL(MethodSpec):
    name, config, summary = "coral", CORALConfig, "EAGLE feature drafter + LM-head router"
    drafter_kinds = ("coral",)

    def claims(self, evidence):
        """The LM head dominates the feature drafter's latency at a large vocabulary, and the router cuts
        it (CORAL Fig. 2): one-token forwards of the head, the drafter and its routed twin."""
        plain = [d for d in evidence.drafters_of(self.name) if evidence.drafters[d].router is None]
        routed = [d for d in evidence.drafters_of(self.name) if evidence.drafters[d].router is not None]
        if not plain or not routed:
            return []
        head, cut = evidence.forward_s(role="lm_head"), evidence.forward_s(role="router_head")
        drafter, routed_d = evidence.drafters[plain[0]], evidence.drafters[routed[0]]
        whole, lean = evidence.forward_s(model=drafter.model), evidence.forward_s(model=routed_d.model)
        router = f"{routed_d.router.groups}:{routed_d.router.top_n}"
        return [f"the LM head dominates the feature drafter's latency at this vocabulary (CORAL Fig. 2): head "
                f"{1e3 * head:.2f} ms of the drafter's {1e3 * whole:.2f} ms ({100 * head / whole:.0f}%) -> "
                f"{verdict(head > 0.5 * whole)}; the {router} router cuts the head to {1e3 * cut:.2f} ms and the "
                f"drafter to {1e3 * lean:.2f} ms ({whole / lean:.2f}x) -> {verdict(lean < whole)}"]
    decoder = "runtime.drafters.coral:Coral"
    calibration = ("coral g2", "coral g4", "coral g8")
    campaign = ("coral g3", "coral g5") + tuple(f"coral g4 N{g} top{n}" for g, n in ROUTERS)
    plot = PlotSpec(x="gamma", hue="router", labels={"router": "LM-head router, groups:top-n"})
    sampler_options = {"router_recall": ("a router's recall, overriding the acceptance entry's", 0.0, 1.0)}
    acceptance_parts = ("router_recall",)

    def acceptance_part(self, raw, where, part=None):
        """`router_recall`: {"groups/top_n": recall in [0, 1]}."""
        if not isinstance(raw, dict) or not raw:
            raise InputError(f"{where}: router_recall must map 'groups/top_n' to a recall in [0, 1]")
        recalls = []
        for key, value in raw.items():
            groups, _, top_n = str(key).partition("/")
            if not (groups.isdigit() and top_n.isdigit() and 1 <= int(top_n) <= int(groups)):
                raise InputError(f"{where}: router_recall key {key!r} is not 'groups/top_n' with 1 <= top_n <= groups")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise InputError(f"{where}: router_recall['{key}'] must be a recall in [0, 1], got {value!r}")
            recalls.append(((int(groups), int(top_n)), float(value)))
        return RouterRecall(tuple(sorted(recalls)))
    no_counterpart = {"hf": "no EAGLE feature drafter in assisted generation"}
    engine_offered, aliases = True, tuple(ENGINE_METHODS)     # CORAL without a router is EAGLE; MTP is its format

    def assumed_drafters(self, target, arch):
        """EAGLE-2's tree (CORAL's Table 2 acceptance of EAGLE-2 on Llama-3-8B) and an EAGLE-3 chain
        (SpecDecode-Bench's EAGLE-3 on Llama-3.1-8B under vLLM), each head built from the target's
        dimensions. MTP needs the target's own prediction layers, which the registry's targets lack."""
        vocab = min(EAGLE3_VOCAB, int(arch.vocab))
        return {"eagle-tree": AssumedDrafter({"kind": "coral", "model": f"eagle-{target}", "engine_method": "eagle",
                                              "tree": dict(EAGLE_TREE)}, drafter_arch("coral", arch),
                                             "coral-llama-3-8b-a6000", "eagle", "mt-bench",
                                             "the acceptance of EAGLE-2 (depth 6, 60 candidates) on Llama-3-8B, CORAL Table 2"),
                "eagle3-chain": AssumedDrafter({"kind": "coral", "model": f"eagle3-{target}", "engine_method": "eagle3",
                                                "draft_vocab": vocab},
                                               drafter_arch("coral", arch, eagle3=True, draft_vocab=vocab),
                                               "llama-3.1-8b-h100-vllm", "eagle3", "sharegpt",
                                               "the acceptance of EAGLE-3 chains on Llama-3.1-8B-Instruct under vLLM "
                                               "(SpecDecode-Bench)")}

    def drafters(self, arch):
        """The EAGLE feature drafter, and the same with each of `ROUTERS` (the first one trained)."""
        out = {"coral": {"kind": "coral", "model": f"eagle@{arch}", "file": "coral/coral.safetensors"}}
        for i, (groups, top_n) in enumerate(ROUTERS):
            name = "coral-router" if i == 0 else f"coral-router{groups}:{top_n}"
            out[name] = {"kind": "coral", "model": f"{router_model(groups, top_n)}@{arch}",
                         "router": {"groups": groups, "top_n": top_n},
                         **({"file": "router/coral_router.safetensors"} if i == 0 else {})}
        return out

    def space(self, setup, groups=GROUPS, top_n=TOP_N, depths=DEPTHS):
        """Depths x (no router, and each (N, top-n) with a recorded recall); a drafter whose own
        head routes gets depths only."""
        pairs = [(0, 0)]
        if setup.drafter_spec.router is None:
            part = setup.acceptance.part("router_recall")
            recorded = part.routers if part is not None else set()
            pairs += [(n, t) for n in groups for t in top_n if t <= n // 2 and (n, t) in recorded]
        rows = [(d, n, t) for (n, t) in pairs for d in depths]
        frame = pd.DataFrame(rows, columns=["gamma", "groups", "top_n"]).astype(np.int64)
        frame["router"] = [f"{n}:{t}" if n else "none" for _, n, t in rows]
        frame["config"] = self.config.labels(frame)
        return frame

    def _router(self, setup, frame):
        groups, top_n = frame["groups"].to_numpy(np.int64), frame["top_n"].to_numpy(np.int64)
        pairs = {(int(n), int(t)) for n, t in zip(groups, top_n)}
        recall = {p: recall_of(setup, *p) for p in pairs}
        rec = np.asarray([recall[(int(n), int(t))] for n, t in zip(groups, top_n)], dtype=float)
        share = np.where(groups > 0, top_n / np.maximum(groups, 1), 1.0)
        return rec, share

    def expected_tokens(self, setup, frame):
        recall, _ = self._router(setup, frame)
        return chain_tokens(setup, frame["gamma"].to_numpy(np.int64), scale=recall)

    def step_shape(self, setup, frame):
        gamma = frame["gamma"].to_numpy(np.int64)
        _, share = self._router(setup, frame)
        head = setup.drafter_spec.head_model
        if np.any(share < 1) and not head:
            raise InputError("coral router needs the drafter's 'head_model' latency to price top_n/groups")
        parts = (DraftPart(drafter_model(setup)),) + ((DraftPart(head, share),) if head else ())
        per_level = tree_width(setup)
        width = chain_width(gamma)
        width[:, 1:] *= per_level
        return StepShape(setup.target, per_level * gamma + 1.0, parts, width, overhead_s=setup.overhead_s,
                         draft_kv_model=drafter_model(setup))

    def to_engine(self, engine, setup, config):
        if engine == "hf":
            return super().to_engine(engine, setup, config)
        vllm_method, sglang_algorithm = engine_method(setup)
        routed = config.groups or setup.drafter_spec.router is not None
        router = "CORAL's LM-head router has no counterpart: the drafter's head runs in full" if routed else ""
        if engine == "vllm":       # vLLM's EAGLE drafts a chain: priced as one (`chain_twin`)
            notes = "; ".join(n for n in (router, tree_note(setup, config)) if n)
            return replace(sd_vllm(setup, config, vllm_method), match="approximate" if notes else "exact", differs=notes,
                           runs_on=chain_twin(setup), unpriced=router)
        model = drafter_checkpoint(setup)     # SGLang's EAGLE drafts the tree: top-k a level, the verified tokens
        return EngineConfig("sglang", {"--speculative-algorithm": sglang_algorithm, "--speculative-draft-model-path": model,
                                       "--speculative-num-steps": config.gamma,
                                       "--speculative-eagle-topk": tree_width(setup),
                                       "--speculative-num-draft-tokens": verified_tokens(self, setup, config)},
                            "approximate" if router else "exact", router, (model,),
                            requires=sglang_requires(sglang_algorithm))

    def sampler(self, setup, config, acceptance_model="independent", router_recall=None, **options):
        recall = recall_of(setup, config.groups, config.top_n) if router_recall is None else float(router_recall)
        return chain_sampler(setup, config, config.gamma, scale=recall, acceptance_model=acceptance_model)


SPEC = CORAL()
ORDER = 7
