"""The Python detector's answer never depends on the hash seed.

vLLM 0.10.2 has two modules named ``…backends.flash_attn`` and imports the third-party
``flash_attn`` package elsewhere. The import used to resolve, by name suffix, to whichever of the
two a set's iteration met first (the hash seed decided), and the module it hit was then remembered
as unloadable before its round came: on some seeds one ``flash_attn.py`` was never walked and its
gates were silently lost (95 or 101 gates on vLLM 0.10.2; 103 on every seed now). A suffix two
modules share now names neither, and a module is only remembered once its round has come.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FILES = {
    "pkg/__init__.py": "",
    "pkg/utils/__init__.py": "",
    "pkg/utils/fa_utils.py": (
        "import torch\n\n\n"
        "def get_flash_attn_version():\n"
        "    major, _ = torch.cuda.get_device_capability()\n"
        "    return 3 if major == 9 else 2\n"
    ),
    "pkg/mla/__init__.py": "",
    "pkg/mla/common.py": (
        "import torch\n"
        "from flash_attn import flash_attn_varlen_func  # the third-party package\n\n"
        "USE_MLA = torch.cuda.get_device_capability()[0] >= 9  # read first: it queries the device\n"
        "KERNEL = flash_attn_varlen_func if USE_MLA else None  # uses the import: resolves it\n"
    ),
    "pkg/v0/__init__.py": "",
    "pkg/v0/backends/__init__.py": "",
    "pkg/v0/backends/flash_attn.py": (
        "from pkg.utils.fa_utils import get_flash_attn_version\n\n\n"
        "def pick():\n"
        "    if get_flash_attn_version() == 3:  # gate: v0\n"
        "        return 'fa3'\n"
        "    return 'fa2'\n"
    ),
    "pkg/v1/__init__.py": "",
    "pkg/v1/backends/__init__.py": "",
    "pkg/v1/backends/flash_attn.py": (
        "from pkg.utils.fa_utils import get_flash_attn_version\n\n\n"
        "class Backend:\n"
        "    def __init__(self):\n"
        "        self.version = get_flash_attn_version()\n\n"
        "    def run(self):\n"
        "        if self.version == 3:  # gate: v1\n"
        "            return 'fa3'\n"
        "        return 'fa2'\n"
    ),
}

PROBE = """
import json, sys
from liftgate.detect.python import PythonAnalyzer, source_from_file
root = sys.argv[1]
paths = sorted(sys.argv[2:])
gates = PythonAnalyzer(source_from_file("pkg", None, p, root + "/" + p) for p in paths).analyze()
print(json.dumps(sorted([g.id, g.location.path, g.location.line, g.admitted.names()] for g in gates)))
"""


def _outputs_per_seed(probe: str, args: list[str], seeds: int) -> set[str]:
    """The distinct outputs of ``probe`` run in a fresh interpreter under hash seeds 0 .. seeds - 1."""
    runs = set()
    for seed in range(seeds):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run(
            [sys.executable, "-c", probe, *args], capture_output=True, text=True, check=True, env=env
        ).stdout
        runs.add(out)
    return runs


def test_two_modules_of_one_name_are_both_walked_on_every_hash_seed(tmp_path: Path) -> None:
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    runs = _outputs_per_seed(PROBE, [str(tmp_path), *FILES], seeds=6)
    assert len(runs) == 1, "the gates depend on the hash seed"
    gates = json.loads(runs.pop())
    paths = {path for _id, path, _line, _admitted in gates}
    assert {"pkg/v0/backends/flash_attn.py", "pkg/v1/backends/flash_attn.py"} <= paths
    for _id, path, _line, admitted in gates:
        if path.endswith("flash_attn.py"):
            assert admitted == ["sm_90", "sm_90a"], path


def test_a_lone_import_name_never_means_a_module_inside_a_scanned_package() -> None:
    """``import torch`` in vLLM 0.33.0 is torch, not ``vllm.model_executor.kernels.mhc.torch``
    (taking it for that module hid every ``torch.ops…`` call); a dotted name still resolves by
    suffix: FlashInfer 0.7.2's ``b12x._lib.gating`` is its ``flashinfer.experimental.b12x._lib.gating``
    (an import hook aliases it), and ``sglang.srt.x`` in a tree scanned above ``python/``."""
    from liftgate.detect.py_scope import Scopes

    names = [
        "vllm", "vllm.kernels", "vllm.kernels.mhc", "vllm.kernels.mhc.torch",
        "flashinfer", "flashinfer.experimental", "flashinfer.experimental.b12x",
        "flashinfer.experimental.b12x._lib", "flashinfer.experimental.b12x._lib.gating",
        "python.sglang", "python.sglang.srt", "python.sglang.srt.x",
    ]  # fmt: skip
    scopes = Scopes(lambda _name: None, names)
    assert not scopes.has_module("torch")
    assert scopes.has_module("b12x._lib.gating")
    assert scopes.has_module("sglang.srt.x")
    assert scopes.has_module("mhc.torch")  # dotted: a tree scanned from within


LOOKUP = """
import os

import torch

FLAGS = {"sm_100a": ["-DSM100"], "sm_103a": ["-DSM103"], "sm_110a": ["-DSM110"]}


def target():
    major, minor = torch.cuda.get_device_capability()
    if major == 10:
        return "sm_103a" if os.environ.get("FAMILY") else "sm_100a"  # both, on one device
    return "sm_110a"


def flags():
    return FLAGS[target()]


def build():
    if flags() == ["-DSM100"]:  # gate: lookup
        return "sm100"
    return "other"
"""

EVIDENCE_PROBE = """
import json, sys
from liftgate.detect.python import PythonAnalyzer, source_from_file
gates = PythonAnalyzer([source_from_file("pkg", None, "pkg/jit.py", sys.argv[1])]).analyze()
print(json.dumps([[g.id, g.condition, [(e.text, e.line) for e in g.evidence]] for g in gates]))
"""


def test_a_gates_evidence_is_in_the_same_order_on_every_hash_seed(tmp_path: Path) -> None:
    """A dict looked up with a key that differs between devices (``FLAGS[target()]``, FlashInfer
    0.7.2's ``{"sm_100a": …, "sm_103a": …}[…]``) shows one lookup per key as evidence; they were in
    the order of a set of strings, which the hash seed decides, so two scans of the same files gave
    two reports."""
    path = tmp_path / "jit.py"
    path.write_text(LOOKUP)
    runs = _outputs_per_seed(EVIDENCE_PROBE, [str(path)], seeds=8)
    assert len(runs) == 1, "the evidence depends on the hash seed"
    (gate,) = [g for g in json.loads(runs.pop()) if g[1] == 'flags() == ["-DSM100"]']
    lookups = [text for text, _line in gate[2] if text.startswith("FLAGS[")]
    assert len(lookups) == 3, gate
