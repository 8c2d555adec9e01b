"""Process helpers shared by the integration tests."""

import time


def gone(pid: int, within: float = 10.0) -> bool:
    """True once no process `pid` runs (a zombie counts as gone), waiting up to `within` seconds.

    The process may vanish between opening its ``/proc`` entry and reading it
    (``ProcessLookupError``), which counts as gone too.
    """
    deadline = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
                    return True
        except OSError:  # FileNotFoundError, or ProcessLookupError mid-read
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
