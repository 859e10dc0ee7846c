"""Every capability API `liftgate trace` wraps, called for real (examples/h200_trace.sh).

Each query feeds a gate, so `liftgate scan examples/trace_demo --trace FILE` can show which way
each went; run under `liftgate trace --as ARCH` the answers are another GPU's. Prints one JSON
line with what each API answered (or the error it raised).
"""

import json


def attempt(fn):
    try:
        return fn()
    except Exception as exc:  # an API the machine lacks is a result here, not a failure
        return f"error: {type(exc).__name__}: {exc}"


def torch_path():
    import torch

    major, minor = torch.cuda.get_device_capability()
    if major >= 10:
        return f"tcgen05 path ({major}.{minor})"
    props = torch.cuda.get_device_properties(0)
    if props.major == 9:
        return f"wgmma path on {torch.cuda.get_device_name()}"
    return "mma.sync path"


def triton_path():
    import triton

    target = triton.runtime.driver.active.get_current_target()
    if target.arch >= 90:
        return f"triton {target.backend} sm_{target.arch}"
    return "triton pre-Hopper"


def cupy_path():
    import cupy

    if int(cupy.cuda.Device(0).compute_capability) >= 100:
        return "cupy: Blackwell"
    properties = cupy.cuda.runtime.getDeviceProperties(0)
    return f"cupy: {properties['major']}.{properties['minor']}"


def nvml_path():
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    if (major, minor) < (8, 0):
        raise RuntimeError("needs Ampere or newer")
    return f"nvml: {pynvml.nvmlDeviceGetName(handle)} {major}.{minor}"


if __name__ == "__main__":
    print(json.dumps({fn.__name__: attempt(fn) for fn in (torch_path, triton_path, cupy_path, nvml_path)}))
