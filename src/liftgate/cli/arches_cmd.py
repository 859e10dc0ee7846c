"""``liftgate arches [ARCH]``: the known-architecture table, or one architecture's facts.

The reference a user reaches for when a report names a target: which spellings mean it, its
family, its limits, and which features of the judge's hardware catalog each compile target of its
compute capability can assemble. That last part is where most gates bite: an RTX 5090 runs
block-scaled MMA only from code built for ``sm_120a``/``sm_120f``, never for plain ``sm_120``.
Every fact comes from ``data/archs.json`` or ``data/features.json``.
"""

from __future__ import annotations

import argparse
import enum
import io
import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from liftgate.cli.common import ExitCode, add_format_option, error

if TYPE_CHECKING:
    from rich.console import Console

    from liftgate.arch.core import Arch, Capability
    from liftgate.arch.parse import ArchResolution
    from liftgate.judge.catalog import Feature


class ArchesFormat(str, enum.Enum):
    """What ``arches --format`` accepts; one renderer per member."""

    TABLE = "table"
    JSON = "json"


DEFAULT_WIDTH = 120
PRODUCTS_SHOWN = 2
HEADINGS = ("cc", "targets", "codename", "family", "products", "smem/block\nopt-in", "catalog\nfeatures")
_ANSI_CODE = re.compile(r"\x1b\[[0-9;]*m")
_TRAILING_BLANKS = re.compile(r"(?:\x1b\[[0-9;]*m| )+$", re.MULTILINE)
# archs.json limit name -> (label, unit the data file stores it in).
LIMITS = {
    "smem_per_sm": ("shared memory per SM", "bytes"),
    "smem_per_block_optin": ("shared memory per block (opt-in)", "bytes"),
    "max_threads_per_sm": ("resident threads per SM", "threads"),
    "max_cluster_size": ("cluster size (portable)", "blocks"),
    "max_cluster_size_nonportable": ("cluster size (non-portable opt-in)", "blocks"),
    "tensor_memory_per_sm": ("tensor memory per SM", "bytes"),
}


def configure_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "arches",
        help="list the known architectures, or describe one",
        description=(
            "Without ARCH, list every known compute capability. With ARCH (sm_120a, 12.0, 120, rtx5090, "
            "thor, …), show its targets, product names, family, limits and the catalog features that "
            "ARCH, the other targets of its capability, or none of them support."
        ),
        epilog="Exit codes: 0 ok, 2 unknown architecture or usage error.",
    )
    p.add_argument("arch", nargs="?", metavar="ARCH", help="an architecture or product name")
    add_format_option(p, ArchesFormat, help="output format (default: table)")
    p.set_defaults(run=run)


def _kib(size: int) -> str:
    return f"{size / 1024:.1f}".removesuffix(".0") + " KiB"


def limit_text(name: str, value: int) -> str:
    """``101376 bytes (99 KiB)``, ``1536 threads``; a size of zero reads ``none``."""
    unit = LIMITS.get(name, (name, ""))[1]
    if unit == "bytes":
        return f"{value} bytes ({_kib(value)})" if value else "none"
    return f"{value} {unit}".strip()


def _targets(cap: Capability) -> list[Arch]:
    from liftgate.arch.core import Arch

    return [Arch(cap.major, cap.minor, variant) for variant in cap.variants]


def _summary(cap: Capability, features: Sequence[Feature]) -> dict[str, Any]:
    counts = [(target, sum(target in f.archs for f in features)) for target in _targets(cap)]
    best, count = max(counts, key=lambda pair: pair[1])  # the earliest variant on a tie
    return {
        "cc": f"{cap.major}.{cap.minor}",
        "targets": [t.name for t in _targets(cap)],
        "codename": cap.codename,
        "family": cap.family,
        "products": list(cap.products),
        "former_names": list(cap.former_names),
        "limits": dict(cap.limits),
        "best_target": best.name,
        "features_supported": count,
    }


def _detail(resolution: ArchResolution, cap: Capability, features: Sequence[Feature]) -> dict[str, Any]:
    """Everything about one target; its catalog features split three ways (this target, a sibling, none)."""
    from liftgate.arch.core import arch_data
    from liftgate.judge.catalog import catalog_info

    arch = resolution.arch
    groups: dict[str, list[dict[str, Any]]] = {"supported": [], "other_targets": [], "unsupported": []}
    for item in features:
        siblings = [t.name for t in _targets(cap) if t != arch and t in item.archs]
        group = "supported" if arch in item.archs else "other_targets" if siblings else "unsupported"
        entry = {"id": item.id, "description": item.description, "targets": item.archs.names()}
        groups[group].append({**entry, "sibling_targets": siblings, "available": item.archs.render()})
    members = arch_data().families.get(cap.family, ()) if cap.family else ()
    return {
        "arch": arch.name,
        "spelling": resolution.spelling,
        "note": resolution.note,
        **_summary(cap, features),
        "family_members": [f"{major}.{minor}" for major, minor in members],
        "limit_units": {name: LIMITS.get(name, (name, ""))[1] for name in cap.limits},
        "notes": cap.notes,
        "source": cap.source,
        "catalog_ptxas": catalog_info().ptxas,
        "features": groups,
    }


def _print_table(console: Console, rows: Sequence[dict[str, Any]]) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, collapse_padding=True, header_style="bold")
    for heading, align in zip(HEADINGS, "rllllrr", strict=True):
        table.add_column(heading, justify="right" if align == "r" else "left", no_wrap=heading != "products")
    for row in rows:
        products = row["products"][:PRODUCTS_SHOWN]
        more = len(row["products"]) - len(products)
        smem = row["limits"].get("smem_per_block_optin")
        cells = (
            row["cc"],
            ", ".join(row["targets"]),
            row["codename"],
            row["family"] or "",
            ", ".join(products) + (f", +{more}" if more > 0 else ""),
            _kib(smem) if smem is not None else "?",
            f"{row['features_supported']} ({row['best_target']})",
        )
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table)


def _print_detail(console: Console, info: dict[str, Any]) -> None:
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    def section(heading: str, rows: Sequence[Sequence[str]], style: str = "") -> None:
        """A heading, then indented rows whose first cell is a label in ``style``; cells are `Text`."""
        console.print(Text(heading, style=f"bold {style}".strip()))
        table = Table.grid(padding=(0, 2))
        table.add_column(style=style, no_wrap=True)
        for _ in rows[0][1:] if rows else ():
            table.add_column()
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        console.print(Padding.indent(table, 2))

    cc, arch, groups = info["cc"], info["arch"], info["features"]
    family = "none"
    if info["family"]:
        members = ", ".join(info["family_members"])
        family = (
            f"{info['family']} (members {members}; code built for sm_{info['family']} runs on every member)"
        )
    about = [
        ("targets", ", ".join(info["targets"])),
        ("products", ", ".join(info["products"]) or "none"),
        ("former names", ", ".join(info["former_names"]) or "none"),
        ("family", family),
        ("notes", info["notes"] or "none"),
    ]
    spelled = f"{info['spelling']} \u2192 " if info["spelling"] != arch else ""
    section(f"{spelled}{arch}: compute capability {cc}, {info['codename']}", about)
    section("limits", [(LIMITS.get(k, (k, ""))[0], limit_text(k, v)) for k, v in info["limits"].items()])
    total = sum(map(len, groups.values()))
    console.print()
    console.print(
        Text(f"catalog features ({total}, proven with ptxas {info['catalog_ptxas']})", style="bold")
    )
    rows: list[tuple[str, ...]] = [(f["id"], f["description"]) for f in groups["supported"]]
    section(f"supported by {arch} ({len(rows)})", rows, "green")
    if groups["other_targets"]:
        names = sorted({t for f in groups["other_targets"] for t in f["sibling_targets"]})
        rows = [(f["id"], ", ".join(f["sibling_targets"]), f["description"]) for f in groups["other_targets"]]
        section(f"only with {' or '.join(names)}, not {arch} ({len(rows)})", rows, "yellow")
    rows = [(f["id"], f"available on {f['available']}") for f in groups["unsupported"]]
    section(f"not supported by any {cc} target ({len(rows)})", rows, "red")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from liftgate.arch.core import arch_data
    from liftgate.arch.parse import UnknownArchError, resolve_arch
    from liftgate.judge.catalog import load_catalog

    features = load_catalog()
    to_terminal = sys.stdout.isatty()
    out = io.StringIO()
    color = to_terminal and "NO_COLOR" not in os.environ
    width = max(80, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns) if to_terminal else DEFAULT_WIDTH
    # Every cell and heading is a `Text`, so markup and emoji codes in the data print as written.
    console = Console(file=out, width=width, force_terminal=color, no_color=not color, highlight=False)
    as_json = ArchesFormat(args.format) is ArchesFormat.JSON
    if args.arch is None:
        rows = [_summary(cap, features) for cap in arch_data().capabilities]
        if as_json:
            out.write(json.dumps(rows, indent=2) + "\n")
        else:
            _print_table(console, rows)
    else:
        try:
            resolution = resolve_arch(args.arch)
        except UnknownArchError as exc:
            return error(str(exc))
        if resolution.note:
            sys.stderr.write(f"liftgate: note: {resolution.note}\n")
        cap = arch_data().capability(resolution.arch.cc)
        assert cap is not None, "the parser returns known capabilities only"
        info = _detail(resolution, cap, features)
        if as_json:
            out.write(json.dumps([info], indent=2) + "\n")
        else:
            _print_detail(console, info)
    # rich pads every cell to its column width; trailing blanks only make diffs noisy.
    sys.stdout.write(_TRAILING_BLANKS.sub(lambda m: "".join(_ANSI_CODE.findall(m.group(0))), out.getvalue()))
    sys.stdout.flush()
    return ExitCode.OK
