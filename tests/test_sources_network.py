"""Network tests for the sources stage: a real release fetched from the package index.

The download lands in liftgate's shared cache (``LIFTGATE_CACHE_DIR`` or the user cache dir),
not in ``tmp_path``, so reruns reuse it. Deselect offline with ``-m "not network"``.
"""

from __future__ import annotations

import pytest

from liftgate.sources import SourceError, resolve_sources

pytestmark = pytest.mark.network

ALLREDUCE = "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"


def test_flashinfer_release_is_fetched_and_listed() -> None:
    [package], _ = resolve_sources(["flashinfer-python==0.6.2"])
    assert (package.name, package.version, package.origin) == (
        "flashinfer-python",
        "0.6.2",
        "flashinfer-python==0.6.2",
    )
    [allreduce] = [f for f in package.files if f.path == ALLREDUCE]
    assert (allreduce.package, allreduce.version) == ("flashinfer-python", "0.6.2")
    assert allreduce.size > 10_000
    with open(allreduce.fspath, "rb") as stream:
        assert b"__CUDA_ARCH__" in stream.read()


def test_unknown_version_names_the_package() -> None:
    with pytest.raises(SourceError) as caught:
        resolve_sources(["flashinfer-python==9.9"])
    message = str(caught.value)
    assert message.startswith("flashinfer-python==9.9 is not on the package index; available: ")
    assert "0.6.2" in message or "more)" in message
