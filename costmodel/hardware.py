"""Datasheet figures of the accelerators the latency roofline runs on.

Each entry holds what a roofline needs: memory bandwidth (bytes/s), dense peak FLOP/s per dtype
(tensor cores where the dtype uses them, no structured sparsity) and memory capacity (bytes),
with the datasheet the numbers come from. These are vendor peaks; what a real engine reaches is
a fraction of them, which `costmodel.latency` expresses as efficiencies that calibration fits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

GB = 1e9
TFLOPS = 1e12

DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of `dtype` ('fp16', 'bf16', 'fp32', ...); ValueError if unknown."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype '{dtype}' (known: {', '.join(DTYPE_BYTES)})")
    return DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class Hardware:
    """One accelerator: bandwidth in bytes/s, dense peak FLOP/s per dtype, memory in bytes."""

    name: str
    bandwidth: float
    peak_flops: dict[str, float] = field(hash=False)
    memory: float
    source: str

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for `dtype`; ValueError naming the dtypes this device lists."""
        if dtype not in self.peak_flops:
            raise ValueError(f"hardware '{self.name}' has no peak for dtype '{dtype}' (has: {', '.join(self.peak_flops)})")
        return self.peak_flops[dtype]

    def ridge_intensity(self, dtype: str) -> float:
        """FLOPs per byte above which a kernel at peak is compute-bound."""
        return self.peak(dtype) / self.bandwidth

    def to_dict(self) -> dict:
        return {"name": self.name, "bandwidth": self.bandwidth, "peak_flops": dict(self.peak_flops),
                "memory": self.memory, "source": self.source}


def _half(tflops: float, fp32: float, **extra: float) -> dict[str, float]:
    """Peak table for a device whose fp16 and bf16 tensor-core peaks are equal."""
    table = {"fp16": tflops * TFLOPS, "bf16": tflops * TFLOPS, "fp32": fp32 * TFLOPS}
    table.update({k: v * TFLOPS for k, v in extra.items()})
    return table


HARDWARE: dict[str, Hardware] = {
    h.name: h
    for h in (
        Hardware(
            "V100", 900 * GB, {"fp16": 125 * TFLOPS, "fp32": 15.7 * TFLOPS}, 32 * GB,
            "NVIDIA Tesla V100 datasheet (SXM2 32 GB): 900 GB/s HBM2, 125 TFLOPS fp16 tensor, 15.7 TFLOPS fp32; no bf16",
        ),
        Hardware(
            "A100-40G", 1555 * GB, _half(312, 19.5, tf32=156), 40 * GB,
            "NVIDIA A100 datasheet (SXM4 40 GB): 1,555 GB/s HBM2, 312 TFLOPS fp16/bf16 dense, 156 tf32, 19.5 fp32",
        ),
        Hardware(
            "A100-80G", 2039 * GB, _half(312, 19.5, tf32=156), 80 * GB,
            "NVIDIA A100 datasheet (SXM4 80 GB): 2,039 GB/s HBM2e, 312 TFLOPS fp16/bf16 dense, 156 tf32, 19.5 fp32",
        ),
        Hardware(
            "A6000", 768 * GB, _half(154.8, 38.7), 48 * GB,
            "NVIDIA RTX A6000 datasheet / Ampere GA102 whitepaper: 768 GB/s GDDR6, 154.8 TFLOPS fp16 tensor dense "
            "(309.7 with sparsity), 38.7 fp32",
        ),
        Hardware(
            "RTX3090", 936 * GB, _half(71, 35.6), 24 * GB,
            "NVIDIA Ampere GA102 whitepaper, GeForce RTX 3090: 936 GB/s GDDR6X, 71 TFLOPS fp16 tensor with fp32 "
            "accumulate dense (142 with fp16 accumulate), 35.6 fp32",
        ),
        Hardware(
            "H800", 3350 * GB, _half(989.4, 66.9, fp8=1978.9), 80 * GB,
            "NVIDIA H800 SXM5 (export variant of H100 SXM: same compute and HBM3, reduced NVLink): 3.35 TB/s, "
            "989.4 TFLOPS fp16/bf16 dense, 66.9 fp32",
        ),
        Hardware(
            "H100", 3350 * GB, _half(989.4, 66.9, fp8=1978.9), 80 * GB,
            "NVIDIA H100 datasheet (SXM5 80 GB): 3.35 TB/s HBM3, 989.4 TFLOPS fp16/bf16 dense "
            "(1,979 with sparsity), 66.9 fp32",
        ),
        Hardware(
            "H200", 4800 * GB, _half(989.4, 66.9, fp8=1978.9), 141 * GB,
            "NVIDIA H200 datasheet (SXM 141 GB): 4.8 TB/s HBM3e, 989.4 TFLOPS fp16/bf16 dense, 66.9 fp32",
        ),
        Hardware(
            "CPU", 20 * GB, {"fp32": 0.16 * TFLOPS, "bf16": 0.08 * TFLOPS, "fp16": 0.04 * TFLOPS}, 8 * GB,
            "nominal 2-core x86-64 AVX2 server slice (this project's CI machine): 2 cores x 2.5 GHz x 32 fp32 "
            "FLOP/cycle (two 8-wide FMA units) = 160 GFLOPS fp32; bf16/fp16 are emulated, taken at 1/2 and 1/4; "
            "~20 GB/s DRAM bandwidth per slice. Calibrate before trusting",
        ),
    )
}

ALIASES: dict[str, str] = {
    "A100": "A100-80G", "A100-80GB": "A100-80G", "A100-40GB": "A100-40G", "RTX-3090": "RTX3090", "3090": "RTX3090",
    "RTX-A6000": "A6000", "H100-SXM": "H100", "H100-80G": "H100", "H200-SXM": "H200", "V100-32G": "V100",
    "cpu": "CPU",
}


def get_hardware(name: str) -> Hardware:
    """The Hardware entry for `name` (case-insensitive, common aliases); ValueError listing the known ones."""
    key = ALIASES.get(name, name)
    for known in HARDWARE:
        if known.lower() == str(key).lower():
            return HARDWARE[known]
    for alias, target in ALIASES.items():
        if alias.lower() == str(name).lower():
            return HARDWARE[target]
    raise ValueError(f"unknown hardware '{name}' (known: {', '.join(HARDWARE)})")


def hardware_names() -> list[str]:
    return list(HARDWARE)
