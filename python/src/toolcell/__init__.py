"""toolcell: run Python cells that call your agent's own tools.

    from toolcell import Toolcell

    with Toolcell() as tc:
        @tc.tool
        def lookup(id: str) -> dict:
            \"\"\"Look an order up.\"\"\"
            return {"id": id, "total": 12.5}

        print(tc.execute("print(lookup('A-1')['total'])").output)

`Toolcell` starts `toolcell serve` (the binary installed with this package)
as a child process and talks JSON-RPC to it; `AsyncToolcell` is the same
for asyncio hosts.
"""

from ._binary import find_toolcell_bin
from ._client import AsyncToolcell, Chunk, Tool, ToolCall, Toolcell, current_tool_call
from ._errors import RPCError, ServerExited, ToolcellError, ToolError
from ._result import Display, ExecuteResult, FileChange, FilesChanged, KernelInfo, Usage
from ._schema import function_schema, type_schema

try:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _version

    try:
        __version__ = _version("toolcell")
    except PackageNotFoundError:  # running from a source tree
        __version__ = "0.0.0+unknown"
except ImportError:  # pragma: no cover
    __version__ = "0.0.0+unknown"

__all__ = [
    "AsyncToolcell",
    "Chunk",
    "Display",
    "ExecuteResult",
    "FileChange",
    "FilesChanged",
    "KernelInfo",
    "RPCError",
    "ServerExited",
    "Tool",
    "ToolCall",
    "ToolError",
    "Toolcell",
    "ToolcellError",
    "Usage",
    "current_tool_call",
    "find_toolcell_bin",
    "function_schema",
    "type_schema",
    "__version__",
]
