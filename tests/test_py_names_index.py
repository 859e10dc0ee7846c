"""The Python detector's questions "does this text name an arch-dependent name?" and "which modules
name one of these?" give the answers of the plain set test, however the names and the questions
interleave, while holding less.

The interpreter asks of every function it meets whether its text names something in
``arch_names`` (which only grows), and asks the deferred ones again after each round of walks. It
used to keep each function's identifiers as a set (460 MB for FlashInfer and SGLang); it now keeps
an index from each identifier to the functions whose text holds it (`Interpreter._names_arch`).
The analyser keeps each module's identifiers only while the module may still be asked about: a
module walked, or chosen for the next round, is never asked again.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.detect.python import PythonAnalyzer, source_from_file

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORDS = ["is_sm90", "major", "x", "use_fp8", "self", "cap", "9", "arch_ok", "_y1"]
_TEXTS = st.lists(st.sampled_from([*_WORDS, " ", ".", "(", ")", "==", "\n"]), max_size=12).map("".join)
# A step: ask about function i, or add names to arch_names.
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("ask"), st.integers(0, 5)),
        st.tuples(st.just("add"), st.lists(st.sampled_from(_WORDS), max_size=3)),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(_TEXTS, min_size=6, max_size=6), steps=_STEPS, seed=st.lists(st.sampled_from(_WORDS)))
def test_names_arch_is_the_set_test(
    texts: list[str], steps: list[tuple[str, object]], seed: list[str]
) -> None:
    interpreter = PythonAnalyzer([]).interpreter
    interpreter.arch_names.update(seed)
    nodes = [ast.Pass() for _ in texts]  # six distinct functions, alive for the whole test
    for kind, arg in steps:
        if kind == "add":
            assert isinstance(arg, list)
            interpreter.arch_names.update(arg)
            continue
        assert isinstance(arg, int)
        expected = not set(_IDENTIFIER.findall(texts[arg])).isdisjoint(interpreter.arch_names)
        # The text is only read the first time; later questions pass none.
        assert interpreter._names_arch(None, nodes[arg], texts[arg]) is expected  # type: ignore[arg-type]
        assert interpreter._names_arch(None, nodes[arg], "") is expected  # type: ignore[arg-type]


FILES = {
    "pkg/__init__.py": "",
    "pkg/caps.py": (
        "import torch\n\n\ndef fast_path_ok():\n    return torch.cuda.get_device_capability()[0] == 9\n"
    ),
    # Does not mention the device: walked in the second round, for the name the first found.
    "pkg/use.py": (
        "from pkg.caps import fast_path_ok\n\n\n"
        "def pick():\n"
        "    if fast_path_ok():  # gate\n"
        "        return 'wgmma'\n"
        "    return 'mma'\n"
    ),
    "pkg/other.py": "def unrelated():\n    return 1\n",
}


def test_identifiers_kept_only_for_modules_never_walked(tmp_path: Path) -> None:
    sources = []
    for rel, text in FILES.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        sources.append(source_from_file("pkg", None, rel, str(path)))
    analyzer = PythonAnalyzer(sources)
    gates = analyzer.analyze()
    assert [(g.location.path, g.location.span.start) for g in gates] == [
        ("pkg/caps.py", 5),
        ("pkg/use.py", 5),
    ]
    # pkg.caps was walked in the first round, pkg.use asked about and walked in the second;
    # pkg.other and the empty pkg were asked about and never walked.
    assert set(analyzer._idents) == {"pkg", "pkg.other"}
