"""What every framework adapter shares: the text a model reads for a cell,
tool results as JSON, the end-of-chunks marker of the adapters that relay
a cell's output from a worker thread."""

import json
from typing import Any, Callable, List

from .._result import ExecuteResult


def result_text(result: ExecuteResult) -> str:
    """The cell's result as the text a model should read.

    The cleaned output (stdout, then stderr and the traceback) comes first;
    then, each on its own line and only when present, ``error: …``,
    ``hint: …`` and ``warning: …``; a cell that printed nothing and
    succeeded reads ``(no output)``. Fields such as the kernel, usage and
    the files report stay in the structured result.
    """
    parts: List[str] = []
    out = result.output or ""
    if out:
        parts.append(out if out.endswith("\n") else out + "\n")
    if result.status != "success":
        parts.append(f"status: {result.status}\n")
    if result.error:
        parts.append(f"error: {result.error}\n")
    if result.hint:
        parts.append(f"hint: {result.hint}\n")
    if result.warning:
        parts.append(f"warning: {result.warning}\n")
    if not parts:
        return "(no output)"
    return "".join(parts).rstrip("\n")


class _Done:
    """Marks the end of a cell's chunks in a queue."""


DONE = _Done()


def jsonable(value: Any, default: Callable[[Any], Any]) -> Any:
    """A tool's return value as JSON: as is when it is, else through
    `json.dumps(default=...)` (`default` turns what JSON lacks into what it
    has: a pydantic model's dump, a message's text, ``str()``)."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=default))
