"""A tiny agent host: give the code your agent's own tools.

Starts `toolcell serve`, registers two Python functions as tools, runs a
cell that loops over them (as a model's code would), and prints the result.
Run: python3 examples/agent_host.py   (TOOLCELL=path/to/toolcell to choose the binary)
"""
import json, os, subprocess

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 990.0}
def list_orders(): return sorted(ORDERS)
def order_total(id): return {"id": id, "total": ORDERS[id]}
FUNCS = {"list_orders": list_orders, "order_total": order_total}

proc = subprocess.Popen([os.environ.get("TOOLCELL", "toolcell"), "serve"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

def request(id, method, params):
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}) + "\n")
    for line in proc.stdout:                      # answer the cell's tool calls until our reply
        msg = json.loads(line)
        if msg.get("method") == "tool/call":      # a cell called one of our functions
            p = msg["params"]
            try: reply = {"result": FUNCS[p["name"]](**p["arguments"])}
            except Exception as e: reply = {"error": {"code": 1, "message": str(e)}}
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], **reply}) + "\n")
        elif msg.get("id") == id:
            return msg.get("result", msg.get("error"))

request(1, "tools/register", {"tools": [
    {"name": "list_orders", "description": "Ids of all orders.", "input_schema": {"type": "object"}},
    {"name": "order_total", "description": "One order's total.",
     "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}]})
code = "big = [o for o in list_orders() if order_total(o)['total'] > 100]\nprint('orders over 100:', big)"
print(request(2, "execute", {"code": code})["output"], end="")
proc.stdin.close(); proc.wait()
