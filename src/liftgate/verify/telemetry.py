"""GPU telemetry during a run: NVML sampled in a background thread, at 10 Hz or faster, per GPU.

Fields: power (W, and % of the enforced limit), SM and memory utilisation, SM clock, memory
used, temperature, clock-throttle reasons, and energy from the driver's total-energy counter
where the GPU has one. A field a GPU does not support (GB10 and some consumer cards lack power
or energy counters) is ``None`` — reported as n/a — never an error. Without NVML or a GPU the
sampler records nothing and says why in ``note``. ``nvml`` can be injected (tests use a fake).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FIELDS = ("power_w", "power_pct", "sm_util", "mem_util", "sm_clock_mhz", "mem_used_mib", "temp_c")

# nvmlClocksEventReasons / nvmlClocksThrottleReasons bits (nvml.h).
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


@dataclass
class GpuSeries:
    index: int
    name: str
    samples: dict[str, list[float]] = field(default_factory=lambda: {f: [] for f in FIELDS})
    unsupported: set[str] = field(default_factory=set)
    throttle: set[str] = field(default_factory=set)
    energy_start_mj: float | None = None
    energy_end_mj: float | None = None

    @property
    def energy_j(self) -> float | None:
        if self.energy_start_mj is None or self.energy_end_mj is None:
            return None
        return (self.energy_end_mj - self.energy_start_mj) / 1000.0

    def summary(self, elapsed_s: float) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "name": self.name}
        for f in FIELDS:
            values = self.samples[f]
            out[f"{f}_mean"] = statistics.fmean(values) if values else None
            out[f"{f}_max"] = max(values) if values else None
        energy = self.energy_j
        if energy is None and self.samples["power_w"]:
            out["energy_source"] = "integrated power"
            energy = statistics.fmean(self.samples["power_w"]) * elapsed_s
        elif energy is not None:
            out["energy_source"] = "driver energy counter"
        out["energy_j"] = energy
        out["throttle_reasons"] = sorted(self.throttle)
        out["samples"] = len(self.samples["sm_util"]) or len(self.samples["power_w"])
        out["unsupported"] = sorted(self.unsupported)
        return out


def _load_nvml() -> Any:
    import pynvml

    return pynvml


class Sampler:
    """Samples every visible GPU while a run lasts: ``with Sampler() as s: …; s.summary()``."""

    def __init__(
        self, interval_s: float = 0.05, nvml: Any = None, loader: Callable[[], Any] = _load_nvml
    ) -> None:
        self.interval_s = interval_s
        self.note: str | None = None
        self.gpus: list[GpuSeries] = []
        self._handles: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = 0.0
        self.elapsed_s = 0.0
        try:
            self.nvml = nvml if nvml is not None else loader()
            self.nvml.nvmlInit()
            count = self.nvml.nvmlDeviceGetCount()
        except Exception as exc:  # ImportError, NVMLError (no driver), anything from a broken install
            self.nvml = None
            self.note = (
                f"no GPU telemetry: {exc.__class__.__name__}: {exc}" if str(exc) else "no GPU telemetry"
            )
            return
        if count == 0:
            self.note = "no GPU telemetry: NVML sees no GPU"
            return
        for i in range(count):
            handle = self.nvml.nvmlDeviceGetHandleByIndex(i)
            name = self._call("name", self.nvml.nvmlDeviceGetName, handle)
            if isinstance(name, bytes):
                name = name.decode(errors="replace")
            self._handles.append(handle)
            self.gpus.append(GpuSeries(i, str(name or f"GPU {i}")))

    @property
    def available(self) -> bool:
        return bool(self.gpus)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, gpu: GpuSeries | None = None) -> Any:
        if gpu is not None and what in gpu.unsupported:
            return None
        try:
            return fn(*args)
        except Exception:
            if gpu is not None:
                gpu.unsupported.add(what)
            return None

    def _energy(self, gpu: GpuSeries, handle: Any) -> float | None:
        value = self._call("energy", self.nvml.nvmlDeviceGetTotalEnergyConsumption, handle, gpu=gpu)
        return float(value) if value is not None else None

    def sample_once(self) -> None:
        nv = self.nvml
        for gpu, handle in zip(self.gpus, self._handles, strict=True):
            power = self._call("power_w", nv.nvmlDeviceGetPowerUsage, handle, gpu=gpu)
            limit = self._call("power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, handle, gpu=gpu)
            util = self._call("utilization", nv.nvmlDeviceGetUtilizationRates, handle, gpu=gpu)
            clock = self._call(
                "sm_clock_mhz", nv.nvmlDeviceGetClockInfo, handle, getattr(nv, "NVML_CLOCK_SM", 1), gpu=gpu
            )
            mem = self._call("mem_used_mib", nv.nvmlDeviceGetMemoryInfo, handle, gpu=gpu)
            temp = self._call(
                "temp_c", nv.nvmlDeviceGetTemperature, handle, getattr(nv, "NVML_TEMPERATURE_GPU", 0), gpu=gpu
            )
            reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
            )
            reasons = self._call("throttle", reasons_fn, handle, gpu=gpu) if reasons_fn else None
            s = gpu.samples
            if power is not None:
                s["power_w"].append(power / 1000.0)
                if limit:
                    s["power_pct"].append(100.0 * power / limit)
            if util is not None:
                s["sm_util"].append(float(util.gpu))
                s["mem_util"].append(float(util.memory))
            if clock is not None:
                s["sm_clock_mhz"].append(float(clock))
            if mem is not None:
                s["mem_used_mib"].append(mem.used / (1 << 20))
            if temp is not None:
                s["temp_c"].append(float(temp))
            if reasons:
                gpu.throttle.update(n for n in throttle_names(int(reasons)) if n != "gpu_idle")

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Sampler:
        self.started = time.perf_counter()
        if self.available:
            for gpu, handle in zip(self.gpus, self._handles, strict=True):
                gpu.energy_start_mj = self._energy(gpu, handle)
            self._thread = threading.Thread(target=self._loop, name="liftgate-nvml", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed_s = time.perf_counter() - self.started
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2)
            self.sample_once()
            for gpu, handle in zip(self.gpus, self._handles, strict=True):
                gpu.energy_end_mj = self._energy(gpu, handle)

    def summary(self) -> dict[str, Any]:
        """Per GPU and in total: means and maxima of each field, energy, throttle reasons."""
        per_gpu = [g.summary(self.elapsed_s) for g in self.gpus]
        total: dict[str, Any] = {}
        if per_gpu:
            powers = [g["power_w_mean"] for g in per_gpu if g["power_w_mean"] is not None]
            energies = [g["energy_j"] for g in per_gpu if g["energy_j"] is not None]
            total["power_w_mean"] = sum(powers) if powers else None
            total["energy_j"] = sum(energies) if len(energies) == len(per_gpu) else None
            utils = [g["sm_util_mean"] for g in per_gpu if g["sm_util_mean"] is not None]
            total["sm_util_mean"] = statistics.fmean(utils) if utils else None
        return {"gpus": per_gpu, "total": total, "note": self.note, "interval_s": self.interval_s}
