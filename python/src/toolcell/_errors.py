"""Exceptions of the toolcell client."""

from typing import Any, Optional


class ToolcellError(Exception):
    """Something went wrong talking to `toolcell serve`."""


class ServerExited(ToolcellError):
    """`toolcell serve` ended (or was closed) before answering."""


class RPCError(ToolcellError):
    """`toolcell serve` refused a request with a JSON-RPC error.

    `code` is the JSON-RPC error code (-32602 bad parameters, -32800
    cancelled, ...), `message` the server's explanation.
    """

    def __init__(self, code: int, message: str, data: Any = None, method: Optional[str] = None):
        super().__init__(f"{method + ': ' if method else ''}{message} (code {code})")
        self.code = code
        self.message = message
        self.data = data
        self.method = method


class ToolError(Exception):
    """Raise it from a client tool to fail the call with exactly this message.

    The cell sees a `ToolError` with `message`. Any other exception raised by
    a tool reaches the cell too, as `ToolError("<ExceptionType>: <message>")`.
    `code` is the JSON-RPC error code sent to the server (default -32000).
    """

    def __init__(self, message: str, code: int = -32000):
        super().__init__(message)
        self.message = message
        self.code = code
