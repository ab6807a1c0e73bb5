"""The drafters' self-distillation corpus: what the target is trained to be imitated on.

Corpus (`build_corpus`): documents of token ids, each either
- `generated`: an instruction or code prompt built from templates (generic instructions over a
  fixed topic list; Python standard-library functions with the first line of their docstring),
  in the target's chat format, followed by the target's own greedy continuation (batched
  generation with the KV cache, at most `max_new_tokens`);
- `source`: a seeded window of `chunk_tokens` tokens from a Python standard-library source file.
Nothing comes from MT-Bench or HumanEval: `find_leaks` looks for any `leak_words`-word run of an
evaluation prompt in every document, leaking documents are dropped (counted in `meta`) and the
check is repeated on what is kept. Documents are split train/eval by a seeded permutation.

Cached under `.cache/specsim/train/` in a file named by a content hash of every input (config, model
fingerprint, Python version); the corpus also records the hash of its own contents. The target's
signals on it are `training.data`'s.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import re
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from common import atomic
from common.errors import InputError
from runtime.cache import causal_mask
from runtime.llama import Llama
from runtime.models import LoadedModel
from runtime.prompts import BUILTIN_SETS, ByteTokenizer, Prompt, encode_prompt, load_prompts

DEFAULT_CACHE = Path(".cache/specsim/train")
FORMAT_VERSION = "1"

GENERIC_TEMPLATES = (
    "Write a short paragraph about {topic}.",
    "Give three practical tips about {topic}.",
    "Explain {topic} to a beginner in simple words.",
    "Write a short note to a friend about {topic}.",
    "List some advantages and disadvantages of {topic}.",
    "Describe a typical day that involves {topic}.",
    "Write a short story in which someone starts {topic}.",
    "What questions should I ask before {topic}?",
    "Summarise in five sentences what a newcomer should know about {topic}.",
    "Write a friendly social media post about {topic}.",
    "Compare two different ways of approaching {topic}.",
    "Write a step-by-step plan for {topic}.",
)
TOPICS = (
    "keeping a vegetable garden", "learning to play the guitar", "saving money each month", "the water cycle",
    "recycling household waste", "riding a bicycle to work", "baking bread at home", "reading before sleep",
    "training a puppy", "visiting a public library", "keeping a daily journal", "organising a small office",
    "drinking enough water", "planning a weekend hike", "learning a second language", "writing clear emails",
    "taking care of houseplants", "cooking with seasonal vegetables", "working from home", "volunteering locally",
    "repairing a flat tyre", "the phases of the moon", "how bees make honey", "painting with watercolours",
    "running a first five kilometres", "preparing for a job interview", "sorting old photographs",
    "birdwatching in a park", "keeping a fish tank clean", "making a budget spreadsheet",
    "choosing a used car", "hosting a dinner party", "studying for an exam", "starting a small business",
    "packing for a long trip", "keeping bees", "improving sleep", "teaching a child to swim", "building a bookshelf",
    "the history of the printing press", "how vaccines work", "composting kitchen scraps", "learning to knit",
    "reducing screen time", "renting a first apartment", "walking in the mountains safely", "making pottery",
    "giving a wedding speech", "caring for an elderly parent", "writing a cover letter", "learning chess",
    "planting fruit trees", "cleaning a kitchen quickly", "choosing running shoes", "the life of a honey bee",
    "how rainbows form",
)
EDIT_TEMPLATES = (            # copy-heavy documents: the target hands a function back with one change
    "Add a type hint to every parameter of this function. Return the whole function.",
    "Add a short comment above every statement of this function. Return the whole function.",
    "Rename the local variables of this function to longer, clearer names. Return the whole function.",
    "Rewrite the docstring of this function so that it starts with one summary line. Return the whole function.",
)
CODE_TEMPLATES = (
    "Explain what the Python function `{name}` does. Its documentation starts: \"{doc}\"",
    "Write a short Python example that calls `{name}` and explain the output.",
    "What mistakes do people make when using `{name}` in Python? Its documentation starts: \"{doc}\"",
    "Write a small Python function that uses `{name}` and add a docstring.",
)
STDLIB_MODULES = (
    "bisect", "heapq", "itertools", "functools", "json", "re", "string", "textwrap", "math", "statistics",
    "os.path", "shutil", "glob", "fnmatch", "csv", "difflib", "random", "datetime", "calendar", "copy",
    "collections", "operator", "base64", "hashlib", "zlib", "urllib.parse", "html", "shlex", "fractions",
)


@dataclass(frozen=True)
class CorpusConfig:
    """What the corpus holds; every field enters the cache key."""

    n_generated: int = 640          # instruction + code prompts answered by the target
    code_fraction: float = 0.5      # share of the generated prompts that are about stdlib functions
    n_edit: int = 256               # stdlib functions handed to the target with an edit request (copy-heavy)
    max_new_tokens: int = 128
    gen_batch: int = 16
    n_source: int = 160             # standard-library source windows (one per file; 3.11 has 168 files)
    chunk_tokens: int = 128
    eval_fraction: float = 0.1      # documents held out (by document, seeded)
    leak_words: int = 8             # run length of the evaluation-prompt leak check
    seed: int = 0

    def __post_init__(self):
        if min(self.n_generated, self.n_source, self.n_edit) < 0 or self.n_generated + self.n_source + self.n_edit < 2:
            raise InputError(f"the corpus needs at least 2 documents: --generated + --edit + --source >= 2, each >= 0, "
                             f"got {self.n_generated}, {self.n_edit} and {self.n_source}")
        if not 0.0 < self.eval_fraction < 1.0:
            raise InputError(f"eval_fraction must lie in (0, 1), got {self.eval_fraction}")
        for name in ("max_new_tokens", "gen_batch", "chunk_tokens", "leak_words"):
            if getattr(self, name) < 1:   # the CLI's own option where it has one
                option = "--max-new-tokens" if name == "max_new_tokens" else f"CorpusConfig.{name}"
                raise InputError(f"{option} must be >= 1, got {getattr(self, name)}")


@dataclass
class Corpus:
    """Token documents, their kind (`generated`/`source`) and split (`train`/`eval`), plus metadata."""

    docs: list[list[int]]
    kinds: list[str]
    splits: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> list[list[int]]:
        return [d for d, s in zip(self.docs, self.splits) if s == name]

    def content_hash(self) -> str:
        return content_hash({"docs": self.docs, "kinds": self.kinds, "splits": self.splits})


# ----------------------------------------------------------------------------------- prompts

def stdlib_functions() -> list[tuple[str, str]]:
    """(qualified name, first docstring line) of the public functions of `STDLIB_MODULES`, sorted."""
    out = []
    for mod_name in STDLIB_MODULES:
        module = importlib.import_module(mod_name)
        for name, obj in inspect.getmembers(module, callable):
            if name.startswith("_") or inspect.isclass(obj):
                continue
            doc = (inspect.getdoc(obj) or "").strip().splitlines()
            first = doc[0].strip() if doc else ""
            if 10 <= len(first) <= 160 and "`" not in first and '"' not in first:
                out.append((f"{mod_name}.{name}", first))
    return sorted(set(out))


def instruction_prompts(n: int, code_fraction: float, seed: int) -> list[str]:
    """n distinct prompt texts from the templates, seeded: round(n * code_fraction) about stdlib functions."""
    rng = np.random.default_rng(seed)
    generic = [t.format(topic=topic) for t in GENERIC_TEMPLATES for topic in TOPICS]
    code = [t.format(name=name, doc=doc) for t in CODE_TEMPLATES for name, doc in stdlib_functions()]
    n_code = min(round(n * code_fraction), len(code))
    n_generic = n - n_code
    if n_generic > len(generic):
        raise InputError(f"only {len(generic)} generic and {len(code)} code prompts exist, {n} asked")
    picked = [code[i] for i in rng.choice(len(code), n_code, replace=False)]
    picked += [generic[i] for i in rng.choice(len(generic), n_generic, replace=False)]
    return [picked[i] for i in rng.permutation(len(picked))]


def edit_prompts(n: int, seed: int, max_lines: int = 30) -> list[str]:
    """n distinct edit requests, seeded: the source of a public stdlib function of at most `max_lines`
    lines with one of `EDIT_TEMPLATES`."""
    sources = []
    for mod_name in STDLIB_MODULES:
        module = importlib.import_module(mod_name)
        for name, obj in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            try:
                code = inspect.getsource(obj)
            except (OSError, TypeError):
                continue
            if 3 <= code.count("\n") <= max_lines:
                sources.append((f"{mod_name}.{name}", code.strip("\n")))
    sources = sorted(set(sources))
    if n > len(sources) * len(EDIT_TEMPLATES):
        raise InputError(f"only {len(sources) * len(EDIT_TEMPLATES)} edit prompts exist, {n} asked")
    rng = np.random.default_rng(seed + 1)
    picks = rng.choice(len(sources) * len(EDIT_TEMPLATES), n, replace=False)
    return [f"Here is a Python function:\n\n```python\n{sources[i // len(EDIT_TEMPLATES)][1]}\n```\n\n"
            f"{EDIT_TEMPLATES[i % len(EDIT_TEMPLATES)]}" for i in picks]


def stdlib_source_files() -> list[Path]:
    """The top-level `.py` files of this Python's standard library, sorted by name."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py") if p.is_file())


# ----------------------------------------------------------------------------------- leak check

def _words(text: str) -> list[str]:
    return re.findall(r"\S+", text.lower())


def evaluation_texts() -> list[str]:
    """Every user turn of the built-in evaluation sets (MT-Bench, HumanEval, code-edit's HumanEval
    solutions, lib-edit's boltons functions): text that must never be trained on."""
    return [turn for name in BUILTIN_SETS for p in load_prompts(name) for turn in p.turns]


def find_leaks(texts: Sequence[str], eval_texts: Sequence[str], n_words: int = 8) -> list[tuple[int, str]]:
    """(index, the shared words) of each text that contains a run of `n_words` words of an evaluation text.

    Words are whitespace-separated, lower-cased. Evaluation texts shorter than `n_words` words are
    matched whole (as a word run) so short prompts are checked too.
    """
    grams: set[tuple[str, ...]] = set()
    for text in eval_texts:
        words = _words(text)
        width = min(n_words, len(words))
        grams.update(tuple(words[i:i + width]) for i in range(len(words) - width + 1))
    widths = sorted({len(g) for g in grams})
    leaks = []
    for index, text in enumerate(texts):
        words = _words(text)
        hit = next((g for w in widths for i in range(len(words) - w + 1)
                    if (g := tuple(words[i:i + w])) in grams), None)
        if hit is not None:
            leaks.append((index, " ".join(hit)))
    return leaks


# ----------------------------------------------------------------------------------- generation

def _encode_text(tokenizer: Any, text: str) -> list[int]:
    if isinstance(tokenizer, ByteTokenizer):
        return tokenizer.encode(text)
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]


def generate_greedy(model: Llama, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                    eos_token_id: int | None, pad_id: int = 0) -> list[list[int]]:
    """Greedy continuations of several prompts at once (left padding, one shared KV cache).

    Each row gets its own position ids and a mask that hides its padding; a padded query sees
    itself only (finite values, never read). Stops at `eos_token_id` (kept) or `max_new_tokens`.
    """
    b, width = len(prompts), max(len(p) for p in prompts)
    pads = torch.tensor([width - len(p) for p in prompts], device=model.device)
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts], device=model.device)
    cols = torch.arange(width, device=model.device)
    valid = cols[None, :] >= pads[:, None]                                   # [b, width] real keys
    mask = (causal_mask(0, width, model.device)[None] & valid[:, None, :]) | torch.eye(
        width, dtype=torch.bool, device=model.device)[None]
    positions = (cols[None, :] - pads[:, None]).clamp(min=0)
    cache = model.new_cache(batch=b, capacity=width + max_new_tokens)
    out: list[list[int]] = [[] for _ in range(b)]
    done = torch.zeros(b, dtype=torch.bool, device=model.device)
    with torch.no_grad():
        logits = model(ids, cache, positions, mask[:, None], logits_at=slice(-1, None)).logits[:, -1]
        for step in range(max_new_tokens):
            token = logits.argmax(-1)
            for r in range(b):
                if not done[r]:
                    out[r].append(int(token[r]))
            if eos_token_id is not None:
                done |= token == eos_token_id
            if bool(done.all()) or step + 1 == max_new_tokens:
                break
            valid = torch.cat([valid, torch.ones(b, 1, dtype=torch.bool, device=model.device)], dim=1)
            pos = (positions[:, -1:] + 1 + step)
            logits = model(token[:, None], cache, pos, valid[:, None, None, :]).logits[:, -1]
    return out


# ----------------------------------------------------------------------------------- corpus

def content_hash(obj: Any) -> str:
    """16 hex digits of the SHA-256 of `obj` as sorted JSON: the cache files' names."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def model_fingerprint(loaded: LoadedModel) -> str:
    """Name, shape and a weight checksum: a different target gives a different cache key."""
    m = loaded.model
    with torch.no_grad():
        weights = [float(p.double().sum()) for p in list(m.parameters())[:4]] + [float(m.lm_head.weight.double().sum())]
    return content_hash({"name": loaded.name, "config": {k: v for k, v in m.config.__dict__.items() if k != "inv_freq"},
                 "weights": weights})


def _tokenizer_of(loaded: LoadedModel) -> Any:
    return loaded.tokenizer if loaded.tokenizer is not None else ByteTokenizer(loaded.vocab_size)


def _build_corpus(loaded: LoadedModel, config: CorpusConfig, log) -> Corpus:
    tokenizer = _tokenizer_of(loaded)
    eos = getattr(tokenizer, "eos_token_id", None)
    rng = np.random.default_rng(config.seed)
    started = time.perf_counter()
    texts = instruction_prompts(config.n_generated, config.code_fraction, config.seed)
    text_kinds = ["generated"] * len(texts) + ["edit"] * config.n_edit
    texts += edit_prompts(config.n_edit, config.seed) if config.n_edit else []
    prompt_ids = [encode_prompt(Prompt(f"train/{i}", (t,), "train"), tokenizer) for i, t in enumerate(texts)]
    docs, kinds = [], []
    for lo in range(0, len(prompt_ids), config.gen_batch):
        batch = prompt_ids[lo:lo + config.gen_batch]
        for p, g in zip(batch, generate_greedy(loaded.model, batch, config.max_new_tokens, eos)):
            docs.append(list(p) + g)
        kinds += text_kinds[lo:lo + config.gen_batch]
        log(f"generated {len(docs)}/{len(prompt_ids)} answers ({time.perf_counter() - started:.0f} s)")
    gen_seconds = time.perf_counter() - started
    files = stdlib_source_files()
    for i in rng.choice(len(files), min(config.n_source, len(files)), replace=False):
        ids = _encode_text(tokenizer, files[i].read_text(encoding="utf-8", errors="replace"))
        if len(ids) < 16:
            continue
        start = int(rng.integers(0, max(1, len(ids) - config.chunk_tokens)))
        docs.append(ids[start:start + config.chunk_tokens])
        kinds.append("source")
    decoded = [tokenizer.decode(d, skip_special_tokens=True) for d in docs]
    evals = evaluation_texts()
    leaked = {i for i, _ in find_leaks(decoded, evals, config.leak_words)}
    docs = [d for i, d in enumerate(docs) if i not in leaked]
    kinds = [k for i, k in enumerate(kinds) if i not in leaked]
    if find_leaks([d for i, d in enumerate(decoded) if i not in leaked], evals, config.leak_words):
        raise RuntimeError("evaluation prompt text remains in the training corpus after filtering")
    order = rng.permutation(len(docs))
    n_eval = max(1, round(config.eval_fraction * len(docs)))
    splits = ["train"] * len(docs)
    for i in order[:n_eval]:
        splits[int(i)] = "eval"
    meta = {"generation_seconds": round(gen_seconds, 1), "leaked_dropped": len(leaked),
            "tokens": int(sum(len(d) for d in docs)), "documents": len(docs),
            "generated": kinds.count("generated"), "edit": kinds.count("edit"), "source": kinds.count("source")}
    return Corpus(docs, kinds, splits, meta)


def build_corpus(loaded: LoadedModel, config: CorpusConfig = CorpusConfig(), *,
                 cache_dir: str | Path | None = DEFAULT_CACHE, log=print) -> Corpus:
    """The corpus for `loaded` (target with tokenizer), from the cache when it was built before."""
    key = content_hash({"v": FORMAT_VERSION, "config": asdict(config), "model": model_fingerprint(loaded),
                "python": sys.version_info[:2]})
    path = Path(cache_dir) / f"corpus-{key}.json" if cache_dir is not None else None
    if path is not None and path.is_file():
        raw = json.loads(path.read_text())
        corpus = Corpus(raw["docs"], raw["kinds"], raw["splits"], raw["meta"])
        if corpus.content_hash() != raw["content_hash"]:
            raise InputError(f"{path}: cached corpus does not match its content hash; delete the file")
        return corpus
    corpus = _build_corpus(loaded, config, log)
    if path is not None:
        atomic.write_json(path, {**asdict(corpus), "content_hash": corpus.content_hash(), "config": asdict(config)})
    return corpus
