"""What a run measured: metrics read from the JSON a command writes or prints.

Built-in readers know the result files of SGLang's ``bench_serving`` (``--output-file``, one JSON
object a line), vLLM's ``vllm bench serve --save-result`` and AIPerf's
``profile_export_aiperf.json``, and pick output-token throughput, request throughput, TTFT and
ITL. Otherwise the last line of stdout that is a JSON object is read: its numeric fields are the
metrics. ``--metric NAME=FILE:PATH`` reads any other value (``PATH`` is dotted, with ``[i]`` for
list items: ``results[0].tokens_per_s``). Each metric knows whether higher is better.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_LOWER_IS_BETTER = re.compile(r"(ttft|itl|tpot|latency|time|_ms$|_us$|_s$|err|error|wall)", re.I)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    file: str | None  # None: the command's last JSON line
    path: str

    @classmethod
    def parse(cls, text: str) -> MetricSpec:
        """``NAME=FILE:PATH`` or ``NAME=PATH`` (from the last JSON line of stdout)."""
        name, sep, rest = text.partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise ValueError(f"--metric {text!r}: expected NAME=FILE:JSONPATH or NAME=JSONPATH")
        file, colon, path = rest.rpartition(":")
        if not colon:
            return cls(name.strip(), None, rest.strip())
        return cls(name.strip(), file.strip() or None, path.strip())


def higher_is_better(name: str) -> bool:
    return not _LOWER_IS_BETTER.search(name) or "throughput" in name or "per_s" in name or "per_j" in name


def lookup(doc: Any, path: str) -> Any:
    """``a.b[0].c`` in nested dicts and lists; None when absent."""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(doc, list) or index >= len(doc):
                return None
            doc = doc[index]
        else:
            if not isinstance(doc, dict) or part not in doc:
                return None
            doc = doc[part]
    return doc


def last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict) and isinstance(value.get("avg"), (int, float)):  # AIPerf's {"avg": …}
        return float(value["avg"])
    return None


def known_format(doc: Mapping[str, Any]) -> dict[str, float]:
    """Standard serving metrics from SGLang, vLLM or AIPerf result documents."""
    out: dict[str, float] = {}
    names = {
        "output_throughput": ("output_throughput", "output_token_throughput"),
        "request_throughput": ("request_throughput",),
        "ttft_ms": ("mean_ttft_ms", "time_to_first_token"),
        "itl_ms": ("mean_itl_ms", "inter_token_latency"),
        "total_token_throughput": ("total_token_throughput",),
    }
    for metric, keys in names.items():
        for key in keys:
            value = _number(doc.get(key))
            if value is not None:
                out[metric] = value
                break
    return out


def read_json_file(path: str) -> dict[str, Any] | None:
    """A JSON object file, or the last JSON object of a JSON-lines file (SGLang appends one a run)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    try:
        doc = json.loads(text)
        return doc if isinstance(doc, dict) else None
    except ValueError:
        return last_json_line(text)


def collect(stdout: str, specs: list[MetricSpec], result_files: list[str]) -> dict[str, float]:
    """Every metric of one run: named specs, known result files, then the last JSON line."""
    out: dict[str, float] = {}
    for path in result_files:
        doc = read_json_file(path)
        if doc:
            out.update(known_format(doc))
    line = last_json_line(stdout)
    if line:
        known = known_format(line)
        out.update(known or {k: v for k, v in ((k, _number(v)) for k, v in line.items()) if v is not None})
    for spec in specs:
        doc = read_json_file(spec.file) if spec.file else line
        value = _number(lookup(doc, spec.path)) if doc is not None else None
        if value is not None:
            out[spec.name] = value
    return out
