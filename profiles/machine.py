"""The machine a Profile's step costs were measured on, and this one, so that a prediction says when
it is read on another.

Latency belongs to the hardware; on a CPU the step's shape (how a 4-token verify compares with a
plain step, what the BLAS does at 1-8 rows) moves with the CPU model, its SIMD instructions, the
threads used and the torch/BLAS build, not only its speed. `Machine` records those (and a GPU's name,
driver and clocks), `this_machine` reads them here, `differences` says what differs. Two cloud machines
of one kind read alike on all of these and still price a step differently (another 2-core guest of the
same kind ran plain decoding at 22-23 ms a step where the bundled Profile was recorded at 32-34 ms), so a
machine also records a hash of its own identity (`host`), compared where both sides have one. A paper's
Profile states only the GPU it was measured on (its datasheet hardware): `Machine.datasheet`.
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from common.errors import InputError

# SIMD instructions that change which kernels a BLAS or oneDNN picks (x86 /proc/cpuinfo flags, arm Features)
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimdhp", "sve", "sve2",
             "bf16", "i8mm")
# what makes two machines price a step differently (clocks and the CPU's speed are not here: pairing a
# measurement with its own plain decoding divides a uniform speed out; the shape is what does not divide)
IDENTITY = ("cpu", "isa", "cores", "threads", "torch", "blas", "gpu", "gpu_driver", "host")
CPUINFO = "/proc/cpuinfo"
RECORDED_LATER = ("host",)          # fields older Profiles lack: compared only where both sides record one
HOST_IDS = ("/sys/class/dmi/id/product_uuid", "/etc/machine-id")   # this machine's own id, the first readable


@dataclass(frozen=True)
class Machine:
    cpu: str = ""                   # CPU model name ("" for a datasheet Profile)
    isa: tuple[str, ...] = ()       # SIMD flags of ISA_FLAGS the CPU has
    cores: int = 0                  # cores the measuring process could run on (its affinity)
    threads: int = 0                # torch threads the measurements used
    torch: str = ""                 # torch version
    blas: str = ""                  # the BLAS torch was built with
    gpu: str = ""                   # GPU name ("" on a CPU)
    gpu_driver: str = ""
    gpu_clocks: str = ""            # max SM and memory clocks, MHz
    datasheet: str = ""             # a Profile fitted to published figures: the hardware they name
    host: str = ""                  # a hash of this machine's own id (HOST_IDS); "" where none was readable

    @classmethod
    def of(cls, raw: Any, where: str = "machine") -> "Machine":
        if not isinstance(raw, dict):
            raise InputError(f"{where} must be an object, got {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InputError(f"{where} has unknown field '{unknown[0]}' (known: {', '.join(sorted(known))})")
        for key in ("cores", "threads"):
            value = raw.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(f"{where}.{key} must be an integer >= 0, got {value!r}")
        isa = raw.get("isa", [])
        if not isinstance(isa, (list, tuple)) or not all(isinstance(f, str) for f in isa):
            raise InputError(f"{where}.isa must be a list of instruction-set flags")
        for key in known - {"cores", "threads", "isa"}:
            if not isinstance(raw.get(key, ""), str):
                raise InputError(f"{where}.{key} must be a string, got {raw[key]!r}")
        return cls(**{**raw, "isa": tuple(isa)})

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["isa"] = list(self.isa)
        return {k: v for k, v in out.items() if v not in ("", 0, [])}

    @property
    def measured(self) -> bool:
        """Whether it was read off a real machine (a datasheet Profile was not)."""
        return bool(self.cpu or self.gpu)

    def describe(self) -> str:
        if not self.measured:
            return f"{self.datasheet or 'unknown hardware'} (datasheet)"
        parts = [self.gpu] if self.gpu else []
        parts.append(f"{self.cpu}, {self.threads} thread(s) of {self.cores} core(s)")
        return "; ".join(parts) + f"; torch {self.torch}, {self.blas}" + (f"; host {self.host}" if self.host else "")

    def differences(self, other: "Machine") -> list[str]:
        """What differs between the two in what shapes a step's cost (`IDENTITY`), one 'field: a vs b'
        each; [] for the same machine, or when either is a datasheet."""
        if not (self.measured and other.measured):
            return []
        out = []
        for key in IDENTITY:
            a, b = getattr(self, key), getattr(other, key)
            if a != b and (key not in RECORDED_LATER or (a and b)):
                show = (lambda v: " ".join(v) or "none") if key == "isa" else str
                out.append(f"{key}: {show(a)} vs {show(b)}")
        return out


def check_machine(recorded: Machine, here: Machine, source: str, other_machine: bool) -> str:
    """Judging a Profile measured on one machine by runs on another: refused (InputError naming both and
    what differs) unless `other_machine`; the line to print otherwise ("" on the same machine). A Profile
    that does not record where it was measured says so: nothing to compare."""
    if not recorded.measured:
        return (f"note: {source} does not record the machine it was measured on ({recorded.describe()}); "
                f"this is {here.describe()}")
    differ = recorded.differences(here)
    if not differ:
        return ""
    said = f"{source} was measured on {recorded.describe()}, this is {here.describe()} ({'; '.join(differ)})"
    if not other_machine:
        raise InputError(f"{said}: move it here first (python -m calibrate.quick --profile {source} --out NEW.json) "
                         "or pass --other-machine to judge it as it is")
    return f"note: {said}; judged as it is (--other-machine)"


def recorded_in(extra: Mapping[str, Any], where: str, otherwise: Machine) -> Machine:
    """The machine a trace's metadata says it was measured on (`extra["machine"]`, as `traces.timing`
    writes it): a Profile built later, or elsewhere, from its latency says where that latency was timed;
    `otherwise` for a trace recorded before traces said it."""
    raw = extra.get("machine")
    return Machine.of(raw, f"{where}: machine") if raw else otherwise


def this_machine(threads: int | None = None, device: str = "cpu") -> Machine:
    """This machine as a Profile records it: `threads` torch threads (default: torch's own count),
    `device` "cpu" or "cuda" (then the GPU's name, driver and clocks)."""
    import torch      # here, not at the top: only commands that measure need torch loaded

    gpu = driver = clocks = ""
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError("device cuda asked for, but torch sees no GPU here")
        gpu = torch.cuda.get_device_name(0)
        driver, clocks = _nvidia_smi()
    return Machine(cpu=_cpu_model(), isa=_isa_flags(), cores=len(os.sched_getaffinity(0)),
                   threads=int(threads if threads is not None else torch.get_num_threads()),
                   torch=torch.__version__.split("+")[0], blas=_blas(torch), gpu=gpu, gpu_driver=driver,
                   gpu_clocks=clocks, host=host_id())


def host_id() -> str:
    """12 hex digits of a hash of the first readable of HOST_IDS (a VM's or board's UUID, the OS
    install's id): the same on one machine from run to run, another on its twin; "" where none is readable."""
    for path in HOST_IDS:
        if found := _read(path).strip():
            return hashlib.sha256(found.encode()).hexdigest()[:12]
    return ""


def _read(path: str) -> str:
    """A system file's text, "" where it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _cpu_model() -> str:
    found = re.search(r"^(?:model name|Model|Hardware)\s*:\s*(.+)$", _read(CPUINFO), flags=re.M)
    return found.group(1).strip() if found else (platform.processor() or platform.machine())


def _isa_flags() -> tuple[str, ...]:
    found = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", _read(CPUINFO), flags=re.M)
    have = set(found.group(1).split()) if found else set()
    return tuple(f for f in ISA_FLAGS if f in have)


def _blas(torch) -> str:
    config = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", config)
    name = re.search(r"BLAS_INFO=(\w+)", config)
    if mkl:
        return f"MKL {mkl.group(1)}"
    return name.group(1) if name else "unknown BLAS"


def _nvidia_smi() -> tuple[str, str]:
    """(driver version, 'sm X MHz, mem Y MHz' max clocks) from nvidia-smi, "" where it is absent."""
    if shutil.which("nvidia-smi") is None:
        return "", ""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return "", ""
    first = [v.strip() for v in out.splitlines()[0].split(",")] if out.strip() else []
    if len(first) < 3:
        return "", ""
    return first[0], f"sm {first[1]} MHz, mem {first[2]} MHz"
