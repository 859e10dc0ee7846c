"""`collector_off` pauses the cyclic collector and gives back the state it found, on an error too."""

from __future__ import annotations

import gc

import pytest

from liftgate.collector import collector_off


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_inside_and_as_it_was_after(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with collector_off():
            assert not gc.isenabled()
            with collector_off():  # nested, as the detector's analysis inside its phase
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), collector_off():
            raise RuntimeError("a failure inside")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
