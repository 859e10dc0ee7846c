"""Scanned code is parsed without the compiler's warnings about it (`py_binding.parse_python`).

An invalid escape sequence (``"\\d"`` in a regex written without ``r``) makes ``ast.parse`` warn:
Python 3.12 prints a ``SyntaxWarning`` with the scanned file's name on the user's terminal, and
where warnings are errors (``-W error``, ``PYTHONWARNINGS=error``, a test suite calling the
library) the parse raised and the file was skipped as "Python syntax error … (Python 2 or a
template?)", its gates lost.
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import liftgate
from liftgate.detect.pybuild import detect_py_build
from liftgate.detect.python import PySource, detect_py_runtime

# The scanned text holds a backslash and a "d": an invalid escape sequence in a plain string.
RUNTIME = (
    "import torch\n"
    "\n"
    'PATTERN = "\\d+ sm_\\d+"  # an invalid escape sequence\n'
    "\n"
    "\n"
    "def use_tcgen05():\n"
    "    major, _minor = torch.cuda.get_device_capability()\n"
    "    if major >= 10:  # line 8\n"
    "        return True\n"
    "    return False\n"
)
BUILD = 'PATTERN = "\\d+"\nnvcc_flags = ["-gencode=arch=compute_90a,code=sm_90a"]  # line 2\n'


def test_the_texts_hold_an_invalid_escape() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for text in (RUNTIME, BUILD):
            try:
                compile(text, "t.py", "exec")
            except SyntaxError as exc:
                assert "invalid escape sequence" in str(exc)
            else:
                raise AssertionError("the fixture must warn")


def test_the_python_detector_reads_a_module_that_warns_where_warnings_are_errors() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gates, skips = detect_py_runtime([PySource("pkg", "1.0", "pkg/mod.py", RUNTIME.encode)])
    assert skips == []
    assert [g.location.line for g in gates] == [8]


def test_the_build_detector_reads_a_file_that_warns_where_warnings_are_errors() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = detect_py_build("pkg", "1.0", "pkg/build.py", BUILD)
    assert found.skips == ()
    assert [g.location.line for g in found.gates] == [2]


def test_a_scan_prints_no_warning_about_the_scanned_code(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(RUNTIME)
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "always",
            "-m",
            "liftgate",
            "scan",
            str(tmp_path),
            "-t",
            "sm_90",
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    assert "1 gate" in proc.stderr + proc.stdout


def test_scanned_code_is_parsed_only_through_parse_python() -> None:
    package = Path(liftgate.__file__).resolve().parent
    found = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "py_binding.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bast\.parse\(|\bcompile\(", line) and "re.compile" not in line
    ]
    assert found == []
