"""``liftgate arches [ARCH]``: the known-arch table and one arch's facts, checked against real data."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from liftgate.cli.arches_cmd import ArchesFormat
from liftgate.cli.main import main
from liftgate.judge.catalog import load_catalog


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _sections(text: str) -> dict[str, str]:
    """Text output split at its unindented headings: heading -> the indented lines under it."""
    sections: dict[str, str] = {}
    heading = ""
    for line in text.splitlines():
        if line and not line.startswith(" "):
            heading = line
            sections[heading] = ""
        else:
            sections[heading] += line + "\n"
    return sections


def _section(text: str, prefix: str) -> str:
    matches = [body for heading, body in _sections(text).items() if heading.startswith(prefix)]
    assert len(matches) == 1, f"expected one section starting {prefix!r} in:\n{text}"
    return matches[0]


def _ids(body: str) -> set[str]:
    return {
        line.split()[0] for line in body.splitlines() if line.startswith("  ") and line.strip()[:1].isalnum()
    }


def _detail_json(arch: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, _ = _run(["arches", arch, "--format", "json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert isinstance(data, list) and len(data) == 1
    return dict(data[0])


def _group_ids(info: dict[str, Any], group: str) -> set[str]:
    return {entry["id"] for entry in info["features"][group]}


def test_table_lists_every_capability(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["arches"], capsys)
    assert code == 0 and err == ""
    rows = {
        line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0][0].isdigit()
    }
    assert {"7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"} <= rows.keys()
    assert "sm_120, sm_120a, sm_120f" in rows["12.0"] and "120f" in rows["12.0"]
    assert "rtx5090" in rows["12.0"] and "99 KiB" in rows["12.0"]
    assert "sm_90, sm_90a" in rows["9.0"] and "227 KiB" in rows["9.0"]
    assert "\x1b[" not in out  # captured output is not a terminal: no colour


def test_json_list_has_one_object_per_capability(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["arches", "-f", "json"], capsys)
    assert code == 0
    rows = json.loads(out)
    assert isinstance(rows, list)
    by_cc = {row["cc"]: row for row in rows}
    assert len(by_cc) == len(rows)
    sm120 = by_cc["12.0"]
    assert sm120["targets"] == ["sm_120", "sm_120a", "sm_120f"]
    assert sm120["family"] == "120f" and "rtx5090" in sm120["products"]
    assert sm120["limits"]["smem_per_block_optin"] == 101376
    catalog = load_catalog()
    counts = {t: sum(f.supports(t) for f in catalog) for t in sm120["targets"]}
    assert sm120["features_supported"] == max(counts.values()) == counts[sm120["best_target"]]
    assert counts["sm_120"] < sm120["features_supported"]  # the a/f variants add block-scaled MMA & co.
    assert by_cc["11.0"]["former_names"][0] == "sm_101"


def test_sm_120_text_groups_features_and_limits(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["arches", "sm_120"], capsys)
    assert code == 0
    assert out.startswith("sm_120: compute capability 12.0")
    assert "101376 bytes (99 KiB)" in _section(out, "limits")
    assert "none" in _section(out, "limits")  # no tensor memory on 12.0
    supported = _ids(_section(out, "supported by sm_120 ("))
    assert "griddepcontrol" in supported and "mma-block-scale" not in supported
    variant_only = _section(out, "only with sm_120a or sm_120f, not sm_120 (")
    assert "mma-block-scale" in _ids(variant_only)
    block_scale = next(line for line in variant_only.splitlines() if "mma-block-scale " in line)
    assert "sm_120a, sm_120f" in block_scale
    unsupported = _ids(_section(out, "not supported by any 12.0 target ("))
    assert {"tcgen05-mma", "wgmma"} <= unsupported
    assert "family        120f (members 12.0, 12.1" in out


def test_sm_120_json_groups(capsys: pytest.CaptureFixture[str]) -> None:
    info = _detail_json("sm_120", capsys)
    assert info["arch"] == "sm_120" and info["cc"] == "12.0"
    assert info["family_members"] == ["12.0", "12.1"]
    assert info["limits"]["smem_per_block_optin"] == 101376
    assert info["limit_units"]["smem_per_block_optin"] == "bytes"
    assert "griddepcontrol" in _group_ids(info, "supported")
    block_scale = next(e for e in info["features"]["other_targets"] if e["id"] == "mma-block-scale")
    assert block_scale["sibling_targets"] == ["sm_120a", "sm_120f"]
    assert "tcgen05-mma" in _group_ids(info, "unsupported")
    every = set().union(*(_group_ids(info, g) for g in info["features"]))
    assert every == {f.id for f in load_catalog()}
    assert sum(len(group) for group in info["features"].values()) == len(load_catalog())


def test_exact_variant_reports_that_variant(capsys: pytest.CaptureFixture[str]) -> None:
    info = _detail_json("sm_120a", capsys)
    assert info["arch"] == "sm_120a"
    assert {"mma-block-scale", "griddepcontrol"} <= _group_ids(info, "supported")
    assert "tcgen05-mma" in _group_ids(info, "unsupported")
    info = _detail_json("sm_120f", capsys)
    multimem_fp8 = next(e for e in info["features"]["other_targets"] if e["id"] == "multimem-fp8")
    assert multimem_fp8["sibling_targets"] == ["sm_120a"]


def test_hopper_wgmma_needs_sm_90a(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["arches", "sm_90a"], capsys)
    assert code == 0
    assert "wgmma" in _ids(_section(out, "supported by sm_90a ("))
    code, out, _ = _run(["arches", "9.0"], capsys)
    assert code == 0
    assert "wgmma" not in _ids(_section(out, "supported by sm_90 ("))
    variant_only = _section(out, "only with sm_90a, not sm_90 (")
    assert "wgmma" in _ids(variant_only)


def test_product_alias_resolves_to_its_capability(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["arches", "rtx5090"], capsys)
    assert code == 0
    assert out.startswith("rtx5090 → sm_120: compute capability 12.0")
    info = _detail_json("rtx5090", capsys)
    assert info["arch"] == "sm_120" and info["spelling"] == "rtx5090"
    assert info["features"] == _detail_json("12.0", capsys)["features"]


def test_thor_shows_its_former_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["arches", "thor"], capsys)
    assert code == 0
    assert "thor → sm_110: compute capability 11.0" in out
    assert "former names  sm_101, sm_101a, sm_101f" in out
    code, out, err = _run(["arches", "sm_101"], capsys)
    assert code == 0
    assert "sm_101 is the name sm_110 had before CUDA 13.0" in err
    assert "sm_110: compute capability 11.0" in out


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("sm_999", "unknown architecture 'sm_999'"),
        ("rtx5900", "did you mean"),
        ("sm_80a", "valid targets: sm_80"),
    ],
)
def test_unknown_arch_exits_2_with_the_parser_message(
    spelling: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(["arches", spelling], capsys)
    assert code == 2
    assert out == ""
    assert err.startswith("liftgate: error: ") and expected in err
    assert "Traceback" not in err


@pytest.mark.parametrize("fmt", list(ArchesFormat))
@pytest.mark.parametrize("arch", [None, "sm_100a"])
def test_every_format(fmt: ArchesFormat, arch: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["arches", *([arch] if arch else []), "--format", fmt.value], capsys)
    assert code == 0 and out.strip()
    if fmt is ArchesFormat.JSON:
        assert isinstance(json.loads(out), list)
    else:
        assert "sm_100a" in out and not any(line.endswith(" ") for line in out.splitlines())


def test_colour_only_on_a_terminal_without_no_color(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    _, out, _ = _run(["arches", "sm_120"], capsys)
    assert "\x1b[" in out
    monkeypatch.setenv("NO_COLOR", "1")
    _, out, _ = _run(["arches", "sm_120"], capsys)
    assert "\x1b[" not in out
