"""The check `liftgate verify` runs on an H200 (docs/verify.md: "On a real GPU").

It calls FlashInfer's Mamba ``selective_state_update`` (decode step of a Mamba-2 layer, shapes
of a Nemotron-H-like model: 128 heads of 64 channels, state 128, 8 groups) on fixed random
inputs, checks the output and the updated state against a float64 reference written in plain
PyTorch, and times the op with CUDA events. On an H200 (capability 9.0) the stock FlashInfer
0.6.2 dispatches to its SM90 module; after ``liftgate lift`` of the ``major >= 10`` dispatch and
of the ``supported_major_versions=[10, 11, 12]`` build filter for sm_90, it runs the SM100
module instead, which FlashInfer's own comment says compiles for sm_90 but runs slower there.

Prints one JSON line (``time_us``, ``calls_per_s``, errors, which module ran) and saves the
output as ``$OUT_NPY`` (default ``ssu_out.npy``) for ``--compare-output``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types


def import_selective_state_update():  # type: ignore[no-untyped-def]
    """``flashinfer.mamba``'s op, without running ``flashinfer/__init__`` when its optional
    dependencies (CuTe DSL, cuDNN frontend) are absent: the mamba path needs neither."""
    try:
        from flashinfer.mamba import selective_state_update

        return selective_state_update
    except ImportError as exc:
        print(f"note: import flashinfer failed ({exc}); loading flashinfer.mamba alone", file=sys.stderr)
    for name in [m for m in sys.modules if m == "flashinfer" or m.startswith("flashinfer.")]:
        del sys.modules[name]
    spec = importlib.util.find_spec("flashinfer")
    assert spec is not None and spec.submodule_search_locations
    package = types.ModuleType("flashinfer")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["flashinfer"] = package
    from flashinfer.mamba.selective_state_update import selective_state_update

    return selective_state_update


def reference(state, x, dt, A, B, C, D, z, dt_bias):  # type: ignore[no-untyped-def]
    """Mamba-2 selective state update in float64 (mamba_ssm's selective_state_update_ref)."""
    import torch

    f = torch.float64
    state, x, dt, A, B, C, D, z, dt_bias = (t.to(f) for t in (state, x, dt, A, B, C, D, z, dt_bias))
    nheads, ngroups = x.shape[1], B.shape[1]
    dt = torch.nn.functional.softplus(dt + dt_bias)
    dA = torch.exp(A * dt[..., None])
    B = B.repeat_interleave(nheads // ngroups, dim=1)
    C = C.repeat_interleave(nheads // ngroups, dim=1)
    state = state * dA + B[:, :, None, :] * dt[..., None] * x[..., None]
    out = (state * C[:, :, None, :]).sum(-1) + x * D
    return out * z * torch.sigmoid(z), state


def main() -> int:
    import numpy as np
    import torch

    selective_state_update = import_selective_state_update()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    batch, nheads, dim, dstate, ngroups = 256, 128, 64, 128, 8
    bf = torch.bfloat16
    # Magnitudes of a trained layer's decode step (values of order 1), so bf16 rounding stays small.
    state = (torch.randn(batch, nheads, dim, dstate, device=dev) * 0.1).to(bf)
    x = (torch.randn(batch, nheads, dim, device=dev) * 0.5).to(bf)
    dt = (torch.randn(batch, nheads, device=dev) * 0.5).to(bf)[:, :, None].expand(-1, -1, dim)
    A = (-torch.rand(nheads, device=dev) - 0.5)[:, None, None].expand(-1, dim, dstate)
    B = (torch.randn(batch, ngroups, dstate, device=dev) * 0.5).to(bf)
    C = (torch.randn(batch, ngroups, dstate, device=dev) * 0.5).to(bf)
    D = torch.randn(nheads, device=dev).to(bf)[:, None].expand(-1, dim)
    z = torch.randn(batch, nheads, dim, device=dev).to(bf)
    dt_bias = (torch.randn(nheads, device=dev) * 0.5).to(bf)[:, None].expand(-1, dim)

    ref_out, ref_state = reference(state, x, dt, A, B, C, D, z, dt_bias)
    work = state.clone()
    out = selective_state_update(work, x, dt, A, B, C, D, z=z, dt_bias=dt_bias, dt_softplus=True)
    torch.cuda.synchronize()
    # Errors relative to the largest reference value: bf16 keeps about 3 significant digits.
    out_err = ((out.double() - ref_out).abs().max() / ref_out.abs().max()).item()
    state_err = ((work.double() - ref_state).abs().max() / ref_state.abs().max()).item()
    np.save(os.environ.get("OUT_NPY", "ssu_out.npy"), out.float().cpu().numpy())

    # Time the op alone: each call on a fresh copy of the state is not needed for timing
    # (the op's cost does not depend on the values), so the state is updated in place.
    for _ in range(20):
        selective_state_update(work, x, dt, A, B, C, D, z=z, dt_bias=dt_bias, dt_softplus=True, out=out)
    iters = 200
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        for _ in range(iters):
            selective_state_update(work, x, dt, A, B, C, D, z=z, dt_bias=dt_bias, dt_softplus=True, out=out)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / iters)
    time_us = sorted(times)[len(times) // 2]
    state_bytes = work.numel() * work.element_size() * 2  # read and written once per call
    mod = sys.modules["flashinfer.mamba.selective_state_update"]
    loaded = [
        name
        for name in ("sm100", "sm90", "base")
        if getattr(mod, f"get_selective_state_update_module_{name}").cache_info().currsize
    ]
    module = ",".join(loaded) or "?"
    print(
        json.dumps(
            {
                "time_us": round(time_us, 3),
                "calls_per_s": round(1e6 / time_us, 1),
                "state_gb_per_s": round(state_bytes / time_us / 1e3, 1),
                "rel_err_out": out_err,
                "rel_err_state": state_err,
                "module": module,
                "device": torch.cuda.get_device_name(),
            }
        )
    )
    ok = out_err < 1e-2 and state_err < 1e-2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
