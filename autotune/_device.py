"""What the device in use can do, and the environment a measurement was taken in."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import platform
import shutil
import sys
import sysconfig
from typing import Any

import psutil
import torch

from autotune._errors import ArgumentError

__all__ = [
    "DeviceInfo",
    "describe_device",
    "device_type",
    "environment",
    "is_accelerator",
    "resolve_device",
]


def device_type(device: str) -> str:
    """The kind of device a device string names: ``"cuda:1"`` -> ``"cuda"``."""
    return torch.device(device).type


def is_accelerator(device: str) -> bool:
    """Whether ``device`` is anything but the CPU (batches are copied to it)."""
    return device_type(device) != "cpu"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceInfo:
    """Capabilities of one device, as they decide which knobs can matter on it."""

    device: str
    type: str
    name: str
    supports_bf16: bool
    supports_fp16: bool
    supports_tf32: bool
    has_cudnn: bool
    supports_compile: bool
    supports_cuda_graphs: bool
    cpu_count: int
    memory_bytes: int


def resolve_device(device: str | torch.device | None) -> str:
    """Normalise ``device`` ('cuda' -> 'cuda:0'; None -> the best available), or say why not."""
    if device is None:
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, str | torch.device):
        raise TypeError(
            f"`device` must be a string such as 'cpu' or 'cuda:0', but got {device!r} "
            f"({type(device).__name__})."
        )
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ArgumentError(
            f"`device` must be a device such as 'cpu', 'cuda' or 'cuda:1', but got {device!r}."
        ) from None
    if dev.type == "cpu":
        return "cpu"
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ArgumentError(
                f"`device` is {str(device)!r}, but CUDA is not available on this machine "
                "(torch.cuda.is_available() is False). Use device='cpu' or leave it unset."
            )
        index = dev.index if dev.index is not None else 0
        count = torch.cuda.device_count()
        if index >= count:
            raise ArgumentError(
                f"`device` is {str(device)!r}, but this machine has {count} CUDA device(s) "
                f"(cuda:0..cuda:{count - 1})."
            )
        return f"cuda:{index}"
    raise ArgumentError(
        f"`device` type {dev.type!r} is not supported yet; autotune tunes 'cpu' and 'cuda' devices."
    )


def _cpu_flag(name: str) -> bool:
    probe = getattr(torch.cpu, name, None)
    try:
        return bool(probe()) if callable(probe) else False
    except Exception:  # a probe that cannot run on this CPU means "no"
        return False


def _compiler_available() -> bool:
    # Inductor builds C++ kernels for the CPU and Triton kernels for CUDA; both need a compiler
    # and the Python headers.
    has_cc = any(shutil.which(cc) for cc in ("cc", "gcc", "g++", "clang"))
    include = sysconfig.get_paths().get("include", "")
    return has_cc and os.path.exists(os.path.join(include, "Python.h"))


@functools.cache
def describe_device(device: str) -> DeviceInfo:
    dev = torch.device(device)
    cpu_count = cpu_share()  # the cores this process may use, not all the machine's
    compile_ok = _compiler_available() and sys.version_info < (3, 14)
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        major = props.major
        # Inductor's Triton kernels need compute capability 7.0 (Volta) or newer.
        triton_ok = major >= 7
        with torch.cuda.device(dev):  # the bf16 check reads the current device
            # Emulated bf16 (pre-Ampere) is slower than fp32: only native support counts.
            bf16 = bool(torch.cuda.is_bf16_supported(including_emulation=False))
        return DeviceInfo(
            device=device,
            type="cuda",
            name=props.name,
            supports_bf16=bf16,
            supports_fp16=True,
            supports_tf32=major >= 8,
            has_cudnn=bool(torch.backends.cudnn.is_available()),
            supports_compile=compile_ok and triton_ok,
            supports_cuda_graphs=True,
            cpu_count=cpu_count,
            memory_bytes=int(props.total_memory),
        )
    return DeviceInfo(
        device=device,
        type="cpu",
        name=_cpu_model(),
        # Without native bf16/fp16 instructions autocast emulates them, slower than fp32.
        supports_bf16=_cpu_flag("_is_avx512_bf16_supported") or _cpu_flag("_is_amx_tile_supported"),
        supports_fp16=_cpu_flag("_is_amx_fp16_supported"),
        supports_tf32=False,
        has_cudnn=False,
        supports_compile=compile_ok,
        supports_cuda_graphs=False,
        cpu_count=cpu_count,
        memory_bytes=int(psutil.virtual_memory().total),
    )


@functools.cache
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML library / no GPU: normal on a CPU machine
        return None


def environment(device: str) -> dict[str, Any]:
    """What a reader of a result (or a bug report) needs to know about where it was measured."""
    import optuna

    info = describe_device(device)
    env: dict[str, Any] = {
        "device": device,
        "device_name": info.name,
        "device_memory_bytes": info.memory_bytes,
        "cpu_model": _cpu_model(),
        "cpu_count": psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        "cpu_share": cpu_share(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "optuna": optuna.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "driver": _nvml_driver() if info.type == "cuda" else None,
    }
    env["fingerprint"] = fingerprint(env)
    return env


def cpu_share() -> int:
    """CPU cores this process may run on (its affinity), which timings on a CPU depend on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return psutil.cpu_count(logical=True) or os.cpu_count() or 1


def fingerprint(env: dict[str, Any]) -> str:
    """A short hash of the hardware and software that decide timings; equal means comparable."""
    keys = ("device_name", "cpu_model", "cpu_count", "cpu_share", "torch", "cuda", "driver")
    text = "|".join(str(env.get(k)) for k in keys)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
