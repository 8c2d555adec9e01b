"""A hostile MCP server for toolcell's tests: plain JSON-RPC over stdio,
standard library only, saying whatever its test tells it to.

    python3 hostile_server.py TOOLS.json

TOOLS.json is an object:
    tools     the list `tools/list` answers with, as is (names, descriptions,
              schemas: anything a hostile server may send)
    stderr    text written to stderr at start (e.g. a secret)
    exit      if set, exit with this status right after writing `stderr`,
              before answering anything (a server that fails to start)

Every `tools/call` answers with one text item: "NAME ARGUMENTS-AS-JSON".
"""

import json
import sys


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    if spec.get("stderr"):
        sys.stderr.write(spec["stderr"])
        sys.stderr.flush()
    if spec.get("exit") is not None:
        sys.exit(spec["exit"])
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        if "id" not in msg or "method" not in msg:
            continue  # a notification or a response
        method = msg["method"]
        params = msg.get("params") or {}
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": spec.get("tools", [])}
        elif method == "tools/call":
            text = "%s %s" % (
                params.get("name"),
                json.dumps(params.get("arguments") or {}, sort_keys=True),
            )
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        elif method == "ping":
            result = {}
        else:
            reply = {
                "jsonrpc": "2.0",
                "id": msg["id"],
                "error": {"code": -32601, "message": "no method " + method},
            }
            print(json.dumps(reply), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)


main()
