"""A tiny MCP server (stdio) for the smolagents integration tests.

It counts its calls in a file named by ORDERS_MCP_LOG, so a test can check
that the tool really ran in this server (reached from the host, not the
kernel).
"""

import os

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("orders", log_level="WARNING")


@mcp.tool()
def shipping_cost(weight_kg: float) -> float:
    """Shipping cost in EUR of a parcel of `weight_kg` kilograms."""
    log = os.environ.get("ORDERS_MCP_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{weight_kg}\n")
    return round(4.0 + 1.5 * weight_kg, 2)


if __name__ == "__main__":
    mcp.run()
