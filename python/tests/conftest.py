"""Fixtures: a real `toolcell serve` (the binary installed with the package,
or $TOOLCELL) per test."""

import time

import pytest

from toolcell import Toolcell

# Cells here make more tool calls than the default budget of 50.
CONFIG = {"execution": {"max_tool_calls": 500, "timeout": 60}}


@pytest.fixture
def tc(tmp_path):
    with Toolcell(config=CONFIG, cwd=tmp_path) as client:
        yield client


def gone(pid: int, within: float = 10.0) -> bool:
    """True once no process `pid` exists (zombies count as gone)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except OSError:  # gone (FileNotFoundError), or gone mid-read (ProcessLookupError)
            return True
        time.sleep(0.05)
    return False
