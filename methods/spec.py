"""What one speculative method tells every layer, stated once (`MethodSpec`), and the registry.

Each method module (`methods/sd.py`, ...) defines its `MethodConfig`, a `MethodSpec` subclass and
its instance `SPEC`; the package registers the modules it finds (a method defined elsewhere calls
`register`). The layers read it instead of keeping method-keyed tables:

| layer        | reads                                                                       |
| ------------ | --------------------------------------------------------------------------- |
| engine       | `decoder` ("module:Class", imported lazily), bound to the spec's config       |
| replay       | `replay_rules(config)`: exact greedy replay from a TokenTrace (methods.replay) |
| closed form  | `expected_tokens(setup, frame)`                                             |
| step cost    | `step_shape(setup, frame)`; consumers call `priced_shape` (engine calibration) |
| simulator    | `sampler(setup, config)` (methods.draws), `replay_rules` for replayed draws   |
| sweep        | `space(setup, **options)`, `options` (its CLI options), `setups`, `plot`      |
| calibration  | `calibration`, `batch_calibration` (labels recorded alone, in batches), `fit_steps`,
|              | `acceptance_part`, `drafters`                                                 |
| GPU campaign | `campaign` (labels run at real sizes), `drafters`                            |
| export       | `to_engine(engine, setup, config)` (methods.engines)                         |

A *frame* is a pandas DataFrame with one row per configuration, one column per config field (the
sweep adds its own columns); `frame_of(configs)` and `configs_of(frame)` convert, and a frame's
labels are `config.labels(frame)`. A *setup* is what a Profile gives the method: target, drafter
and acceptance entry (`Setup`). This package reads a Profile only through the object handed to
it, so every layer above may import it.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import pandas as pd

from common.errors import InputError
from methods.config import MethodConfig, _plain
from methods.engines import EngineConfig, NoCounterpart
from methods.replay import chain_lengths, chain_shapes

if TYPE_CHECKING:       # profiles sits above methods: a Profile is built of what the methods declare
    from profiles import Profile
    from profiles.acceptance import AcceptanceModel
    from profiles.parts import Drafter

BASELINE = "ar"         # plain decoding: every speedup's denominator
CHAIN = "sd"            # one draft model's chain: what an engine's imported chain steps, and a synthetic StepTrace, are


@dataclass(frozen=True)
class Setup:
    """A method's place on a Profile (a `profiles.Profile`): the target, the drafter it
    runs and the acceptance entry."""

    profile: "Profile"
    drafter: str | None = None
    acceptance_key: str | None = None
    overhead_s: float = 0.0
    new_tokens: int | None = None       # the generation's length, its last step clipped (None: a steady state)

    @property
    def target(self) -> str:
        return self.profile.target

    @property
    def drafter_spec(self) -> "Drafter | None":
        """The Profile's entry of the drafter (None: the method runs without one)."""
        return self.profile.drafter(self.drafter) if self.drafter else None

    @property
    def acceptance(self) -> "AcceptanceModel":
        """The acceptance entry of this setup."""
        if self.acceptance_key is None:
            raise InputError(f"no acceptance model chosen on profile '{self.profile.name}'")
        return self.profile.acceptance_model(self.acceptance_key)

    @property
    def target_layers(self) -> int:
        return int(self.profile.arch(self.target).n_layers)

    def need(self, part: str, method: str):
        """The acceptance model's `part` (alpha_at_k, conf_bins, markov, a method's own), or InputError."""
        model = self.acceptance
        if not model.has(part):
            raise InputError(f"acceptance model '{model.name}' lacks '{part}', which method {method} needs")
        return model.part(part)

    @property
    def base(self) -> dict[str, Any]:
        """The setup as the sweep's columns (drafter, acceptance)."""
        out = {"acceptance": self.acceptance_key}
        if self.drafter:
            out["drafter"] = self.drafter
        return out


@dataclass(frozen=True)
class Evidence:
    """What a recording campaign measured of one target, for the methods to check their papers'
    qualitative claims on (`MethodSpec.claims`): the Profile, its drafters by name, the datasets, a
    frame of each (drafter, dataset)'s alpha, and the LatencyTrace rows (model, role, n_tokens, batch,
    seconds)."""

    profile: Any
    drafters: dict
    datasets: tuple[str, ...]
    acceptance: pd.DataFrame
    latency: pd.DataFrame

    def drafters_of(self, kind: str) -> list[str]:
        return [name for name, d in self.drafters.items() if d.kind == kind]

    def forward_s(self, **where: Any) -> float:
        """The median one-token, batch-1 forward of the rows matching `where` (column = value)."""
        rows = self.latency[(self.latency["n_tokens"] == 1) & (self.latency["batch"] == 1)]
        for column, value in where.items():
            rows = rows[rows[column] == value]
        return float(rows["seconds"].median())


def verdict(holds: bool) -> str:
    return "holds" if holds else "does NOT hold"


@dataclass(frozen=True)
class PlotSpec:
    """How the sweep plots a method: speedup against `x`, one line per value of `hue`
    (a heatmap over x and `y` when given); `labels` say what a column that is not a config field
    means (a field is named by its Param's doc)."""

    x: str
    hue: str | None = None
    y: str | None = None
    labels: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class SpaceOption:
    """A sweep option a method's `space` takes by name (`--<name>` of the sweep): its default,
    its help and its least value."""

    default: int
    help: str
    low: int = 1


class MethodSpec:
    """Everything a method is, in one place; subclasses fill in the hooks (module docstring)."""

    name: str = ""
    config: type[MethodConfig] = MethodConfig
    summary: str = ""
    drafter_kinds: tuple[str, ...] = ()       # Profile drafter kinds it runs with; () = no drafter
    needs: str | None = None                  # acceptance part it needs beyond alpha
    decoder: str = ""                          # "module:Class" of the engine decoder
    plot: PlotSpec | None = None
    sweep: bool = True                         # searched by the sweep
    replays_from_outputs: bool = False         # its greedy steps follow from a prompt and the target's output
    options: dict[str, SpaceOption] = {}       # sweep options its space takes by name
    calibration: tuple[str, ...] = ()          # labels whose StepTraces calibrate its step cost
    campaign: tuple[str, ...] = ()             # labels the GPU campaign runs at real sizes
    batch_calibration: tuple[str, ...] = ()    # labels the batch campaign records (its decoder batches)
    no_counterpart: dict[str, str] = {}        # engine -> why the method has no counterpart there
    sampler_options: dict[str, tuple[str, float, float]] = {}   # numbers its `sampler` takes: (what, low, high)
    engine_offered: bool = False               # an engine runs it as it is: priced on every GPU Profile
    aliases: tuple[str, ...] = ()              # the engines' names of it that `parse_methods` takes

    # ---- configurations ------------------------------------------------------------------------
    def parse(self, raw: Any = None) -> MethodConfig:
        """A config from a config, a mapping, JSON text or a label."""
        return self.config.split(raw)[0]

    def frame_of(self, configs: Iterable[MethodConfig]) -> pd.DataFrame:
        """One row per configuration, a column per field, plus `config` (the label)."""
        configs = [self.parse(c) for c in configs]
        frame = pd.DataFrame({key: pd.Series([getattr(c, key) for c in configs], dtype=object)
                              if configs and isinstance(getattr(configs[0], key), tuple)
                              else [getattr(c, key) for c in configs] for key in self.config.keys()},
                             columns=list(self.config.keys()))
        frame["config"] = [c.label for c in configs]
        return frame

    def configs_of(self, frame: pd.DataFrame) -> list[MethodConfig]:
        """The configurations of a frame's rows (its field columns; other columns ignored), read
        column by column: a frame of the selected columns cost a millisecond a call, and the sweep
        reads one row at a time."""
        keys = [k for k in self.config.keys() if k in frame.columns]
        columns = [frame[k].tolist() for k in keys] or [[()] * len(frame)]    # no field column: the defaults
        return [self.config(**{k: _plain(v) for k, v in zip(keys, values)}) for values in zip(*columns)]

    def calibration_configs(self) -> list[MethodConfig]:
        """Configurations to record for the engine calibration (calibrate.engine): two sizes or more, so
        that each step part's scale and fixed cost can be told apart; default: the defaults."""
        return [self.config.from_label(label) for label in self.calibration] or [self.config()]

    def campaign_configs(self) -> list[MethodConfig]:
        """Configurations the GPU campaign runs at real model sizes (none: the method sits it out)."""
        return [self.config.from_label(label) for label in self.campaign]

    # ---- the Profile ------------------------------------------------------------------------------
    def setups(self, profile, temperature: float | None = None, dataset: str | None = None,
               drafter: str | None = None, acceptance: str | None = None) -> list[Setup]:
        """Every (drafter, acceptance entry) this method can run with on `profile`; an explicit
        drafter or acceptance key narrows it. InputError naming what is missing when none."""
        return profile.setups_for(self, temperature=temperature, dataset=dataset, drafter=drafter,
                                  acceptance=acceptance)

    def drafters(self, arch: str) -> dict[str, dict[str, Any]]:
        """Profile drafter entries of this method's own drafter kind at architecture `arch`, as the
        campaigns build them: {name: {"kind", "model" (its latency rows), optional "file" (what
        `python -m training` writes, under the drafter store) and what the kind needs}}."""
        return {}

    @property
    def acceptance_parts(self) -> tuple[str, ...]:
        """The parts of a Profile acceptance entry this method reads and parses itself (by key): its
        own name where its acceptance is a part of its own (`needs` is its name)."""
        return (self.name,) if self.needs == self.name else ()

    def acceptance_part(self, raw: Any, where: str, part: str | None = None) -> Any:
        """The validated part `part` (default: the method's own) of a Profile acceptance entry (an
        object with `.to_dict()`, and `.alpha` for the method's own), InputError naming the bad field."""
        raise NotImplementedError(f"{self.name} has no acceptance part of its own")

    def carried_part(self, part: Any) -> Any:
        """What of its acceptance part `part` holds on a target it was not measured on (an entry
        `calibrate.assumed` carries there): all of it, unless the part records the donor's own generations."""
        return part

    def assumed_drafters(self, target: str, arch) -> dict[str, Any]:
        """{drafter name: `methods.assumed.AssumedDrafter`} it runs with on target `target` (its
        `costmodel.params.Arch`) where no Profile measured it (`engine_offered` methods state some)."""
        return {}

    def claims(self, evidence: Evidence) -> list[str]:
        """The method's paper's qualitative claims checked on a recording (`Evidence`), one line each
        with its numbers and `verdict`; none by default."""
        return []

    def fit_steps(self, frame: pd.DataFrame, *, dataset: str, temperature: float, source: str) -> dict | None:
        """A Profile acceptance entry fitted from this method's own StepTraces (several of its
        configurations in `frame`), for a method whose acceptance is a part of its own (`needs`
        is its name) rather than a drafter's; None for the others."""
        return None

    # ---- the sweep and the closed forms -----------------------------------------------------------
    def space(self, setup: Setup, **options: Any) -> pd.DataFrame:
        """The sweep's configurations on `setup` (a frame; see `frame_of`)."""
        raise NotImplementedError(f"{self.name} has no search space")

    def replayed_space(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The part of a space worth replaying exactly on a TokenTrace (each configuration costs a
        pass over the trace); default: all of it."""
        return frame

    def space_size(self, setup: Setup, **options: Any) -> int:
        """Rows `space(setup, **options)` would hold. This default builds the space (the small
        fixed grids); a method whose space grows with an option counts it without building."""
        return len(self.space(setup, **options))

    def expected_tokens(self, setup: Setup, frame: pd.DataFrame) -> np.ndarray:
        """(C,) tokens one step commits on average (bonus included): the closed form."""
        raise NotImplementedError(f"{self.name} does not define expected_tokens")

    def step_shape(self, setup: Setup, frame: pd.DataFrame):
        """The forwards one step of each configuration runs (`costmodel.step.StepShape`)."""
        raise NotImplementedError(f"{self.name} does not define step_shape")

    def priced_shape(self, setup: Setup, frame: pd.DataFrame):
        """`step_shape` as the engine runs it: the Profile's engine calibration of this method
        folded in (`costmodel.step.StepCalibration`). Every consumer that prices a step uses this."""
        shape = setup.profile.step_calibration(self.name).apply(self.step_shape(setup, frame))
        batching = setup.profile.engine.batching
        return replace(shape, batching=batching) if batching else shape

    def sampler(self, setup: Setup, config: MethodConfig, **options: Any):
        """The simulator's acceptance draws for one configuration (methods.draws.Sampler); `options`:
        the simulator's sampler options, and `new_tokens`, the tokens the stream's decode steps commit
        (None: a served load's requests of many lengths), for a method whose draws depend on it."""
        raise NotImplementedError(f"{self.name} does not define sampler")

    # ---- exact replay ---------------------------------------------------------------------------------
    def replay_rules(self, config: MethodConfig) -> dict[str, Any] | None:
        """The `methods.replay` rules a TokenTrace decides this method's greedy steps by
        ({"levels": ..., "eta": ..., "bins": ...}); None: not replayable."""
        return None

    @property
    def replayable(self) -> bool:
        return type(self).replay_rules is not MethodSpec.replay_rules

    def replay_lengths(self, table, config: MethodConfig) -> np.ndarray | None:
        """(N,) accepted length of a step starting at each TokenTable position (None: not replayable)."""
        rules = self.replay_rules(config)
        return None if rules is None else chain_lengths(table, **rules)

    def replay_shapes(self, table, pos: np.ndarray, config: MethodConfig, shape) -> tuple[np.ndarray, np.ndarray]:
        """(draft forwards, verify tokens) of the replayed steps starting at `pos`, `shape` being
        the configuration's step shape; the same rules as `replay_lengths`."""
        rules = self.replay_rules(config)
        if rules is None:
            raise InputError(f"method {self.name} cannot be replayed from a TokenTrace")
        return chain_shapes(table, pos, verify_tokens=float(np.ravel(shape.verify_tokens)[0]), **rules)

    # ---- the engine and the engines people deploy ----------------------------------------------------
    def decoder_class(self):
        """The engine's Decoder subclass (imported on first use)."""
        module, _, attr = self.decoder.partition(":")
        return getattr(importlib.import_module(module), attr)

    def to_engine(self, engine: str, setup: Setup, config: MethodConfig) -> EngineConfig | NoCounterpart:
        """`config` on `setup` as `engine` (methods.engines.ENGINES) accepts it, or why it has no
        counterpart there (`no_counterpart`)."""
        return NoCounterpart(engine, self.name, self.no_counterpart.get(
            engine, f"{engine} offers no counterpart of {self.name} ({self.summary})"))

    def __repr__(self) -> str:
        return f"<method {self.name}>"


# ---- the registry -----------------------------------------------------------------------------------

_REGISTRY: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    """Add a method (an instance of a MethodSpec subclass); its name must be new."""
    if not spec.name or spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"method name {spec.name!r} is empty or taken")
    if spec.config.method != spec.name:
        raise ValueError(f"method {spec.name}: its config class says method {spec.config.method!r}")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def get(name: str) -> MethodSpec:
    """The registered method `name`; InputError listing the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InputError(f"unknown method '{name}' (known: {', '.join(_REGISTRY)})") from None


def names(sweep_only: bool = False) -> list[str]:
    return [n for n, s in _REGISTRY.items() if s.sweep or not sweep_only]


def specs() -> list[MethodSpec]:
    return list(_REGISTRY.values())


def replaying_specs() -> list[MethodSpec]:
    """The methods whose greedy steps follow from a prompt and the target's answer alone
    (`MethodSpec.replays_from_outputs`)."""
    return [spec for spec in specs() if spec.replays_from_outputs]


def space_options() -> dict[str, SpaceOption]:
    """Every sweep option some registered method's space takes, by name (first declaration wins)."""
    out: dict[str, SpaceOption] = {}
    for spec in specs():
        for key, option in spec.options.items():
            out.setdefault(key, option)
    return out


def drafter_fixed(drafter_spec: "Drafter | None") -> dict[str, Any]:
    """Config fields a Profile drafter fixes: a trained or timed router (its spec's `router`)."""
    return drafter_spec.router.fixed() if drafter_spec is not None and drafter_spec.router else {}


def priced_config(config: MethodConfig, drafter_spec: "Drafter | None") -> MethodConfig:
    """The configuration a Profile prices for `config` run on this drafter: the fields the drafter
    fixes are in its latency and acceptance already, so they take their defaults (a space offers
    no router of its own on a drafter whose head routes)."""
    defaults = type(config)()
    return config.replace(**{k: getattr(defaults, k) for k in drafter_fixed(drafter_spec)})


def engine_config(config: MethodConfig, drafter_spec: "Drafter | None") -> MethodConfig:
    """What the engine runs for a Profile configuration on this drafter (`priced_config`'s inverse)."""
    return config.replace(**drafter_fixed(drafter_spec))


def plain_shape(profile):
    """One plain decoding step on `profile` as the engine runs it: the denominator of every
    speedup, priced through the same step-cost model as the methods."""
    spec = get(BASELINE)
    return spec.priced_shape(Setup(profile), spec.frame_of([spec.config()]))


def parse_methods(text: str | Sequence[str] | None, sweep_only: bool = True) -> list[str]:
    """'sd,mcsd' -> ['sd', 'mcsd']; None or 'all' -> every (swept) method; an engine's name of a
    method (a spec's `aliases`) is that method; an unknown name or a list that names none: InputError."""
    if text is None or (isinstance(text, str) and text.strip().lower() == "all"):
        return names(sweep_only)
    items = text.split(",") if isinstance(text, str) else list(text)
    alias = _engine_names()
    chosen = [alias.get(t.strip().lower(), t.strip().lower()) for t in items if t.strip()]
    if not chosen:
        raise InputError(f"no method named in {text!r} (known: {', '.join(names(sweep_only))}, or 'all')")
    for name in chosen:
        get(name)
    return list(dict.fromkeys(chosen))


def engine_method(name: str) -> MethodSpec:
    """The method a serving engine calls `name` (vLLM's "ngram", "eagle3": a spec's `aliases`): how
    data that names the engine's method (a published study's runs) finds the spec that prices it."""
    alias = _engine_names()
    if name.lower() not in alias:
        raise InputError(f"no method is the engines' '{name}' (known: {', '.join(sorted(alias))})")
    return get(alias[name.lower()])


def _engine_names() -> dict[str, str]:
    return {a: s.name for s in specs() for a in s.aliases}


def parse_config(method: str, raw: Any = None) -> MethodConfig:
    return get(method).parse(raw)


def parse_label(text: str) -> MethodConfig:
    """Any method's configuration from its label ('mcsd k4x2x1 repl')."""
    words = str(text).split()
    if not words:
        raise InputError("empty configuration label")
    return get(words[0]).config.from_label(text)
