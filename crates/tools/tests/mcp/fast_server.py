"""A small MCP server written with the Python `mcp` SDK (FastMCP; `MCPServer`
since mcp 2), for toolcell's MCP client tests.

    python fast_server.py                  # stdio
    python fast_server.py --http PORT      # streamable HTTP on 127.0.0.1:PORT/mcp
    python fast_server.py --garbage        # prints a non-JSON line on stdout first

Tools: echo, add (structured output), fail (raises: isError), slow(seconds, marker)
(creates the file `marker`, when given, as the call begins: a test waits for it),
image(seed) (a PNG whose bytes are PNG_MAGIC + seed), big(mib), pid, add_tool(name)
(registers a tool at run time and sends notifications/tools/list_changed).
"""

import asyncio
import os
import sys
from typing import TypedDict

try:  # mcp >= 2
    from mcp.server.mcpserver import Context, Image
    from mcp.server.mcpserver import MCPServer as FastMCP
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context, FastMCP, Image
    from mcp.server.fastmcp.exceptions import ToolError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

server = FastMCP("fast")


class Sum(TypedDict):
    sum: int


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int = 0) -> Sum:
    """Add two integers."""
    return {"sum": a + b}


@server.tool(structured_output=False)
def fail(message: str) -> str:
    """Always fails with the message."""
    raise ToolError(message)


@server.tool(structured_output=False)
async def slow(seconds: float, marker: str = "") -> str:
    """Sleep, then answer."""
    if marker:
        open(marker, "w").close()
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def image(seed: str) -> Image:
    """A PNG-typed image whose bytes are the PNG magic followed by the seed."""
    return Image(data=PNG_MAGIC + seed.encode(), format="png")


@server.tool(structured_output=False)
def big(mib: float) -> str:
    """A text of `mib` MiB of "x"."""
    return "x" * int(mib * 1024 * 1024)


@server.tool(structured_output=False)
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool(structured_output=False)
async def add_tool(name: str, ctx: Context) -> str:
    """Register a tool `name` (it echoes its text) and tell the client."""

    def extra(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(extra, name=name, description=f"Added at run time: {name}.")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


def main() -> None:
    args = sys.argv[1:]
    print(f"fast_server: starting pid {os.getpid()}", file=sys.stderr, flush=True)
    if "--garbage" in args:
        print("hello from a server that logs to stdout", flush=True)
    if "--http" in args:
        port = int(args[args.index("--http") + 1])
        try:
            server.run("streamable-http", host="127.0.0.1", port=port)
        except TypeError:  # mcp 1.x: host and port are settings
            server.settings.host = "127.0.0.1"
            server.settings.port = port
            server.run("streamable-http")
    else:
        server.run()


if __name__ == "__main__":
    main()
