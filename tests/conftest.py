"""Shared pytest configuration for liftgate's tests."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    # --update-golden: rewrite tests/golden/* from the current output instead of comparing (test_report.py).
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="regenerate the golden files under tests/golden/ instead of comparing against them",
    )
