"""A client-tool client in Python: a reader thread answers `tool/call`s
concurrently (a thread each) while requests wait for their responses.
Exits non-zero with a message when anything is not as documented.

usage: client_tools.py TOOLCELL_BINARY
"""
import json, os, subprocess, sys, tempfile, threading, time

# The default budget is 50 calls per cell; this client makes 101.
config = os.path.join(tempfile.mkdtemp(), "toolcell.toml")
with open(config, "w") as f:
    f.write("[execution]\nmax_tool_calls = 200\n")
proc = subprocess.Popen([sys.argv[1], "serve", "--config", config], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True, bufsize=1)
lock = threading.Lock()
waiting, calls, cancels = {}, [], []


def send(msg):
    with lock:
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()


def answer(msg):
    p = msg["params"]
    args = p["arguments"]
    if p["name"] == "slow_square":
        time.sleep(args.get("delay", 0))
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"square": args["x"] ** 2}})
    elif p["name"] == "explode":
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -1, "message": "boom: " + args["why"]}})


def reader():
    for line in proc.stdout:
        msg = json.loads(line)
        if msg.get("method") == "tool/call":
            calls.append(msg)
            threading.Thread(target=answer, args=(msg,)).start()
        elif msg.get("method") == "$/cancelRequest":
            cancels.append(msg["params"]["id"])
        elif "id" in msg and msg["id"] in waiting:
            waiting[msg["id"]][1] = msg
            waiting[msg["id"]][0].set()


threading.Thread(target=reader, daemon=True).start()


def request(id, method, params):
    waiting[id] = [threading.Event(), None]
    send({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    if not waiting[id][0].wait(60):
        sys.exit("no answer to %s" % method)
    return waiting.pop(id)[1]


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)


r = request(1, "tools/register", {"session": "py", "tools": [
    {"name": "slow_square", "description": "Square x after a delay.",
     "input_schema": {"type": "object", "properties": {
         "x": {"type": "integer"}, "delay": {"type": "number", "default": 0}}, "required": ["x"]},
     "output_schema": {"type": "object", "properties": {"square": {"type": "integer"}}}},
    {"name": "explode", "description": "Always fails.",
     "input_schema": {"type": "object", "properties": {"why": {"type": "string"}}, "required": ["why"]}}]})
check(r.get("result") == {"registered": ["slow_square", "explode"]}, "register: %r" % r)

# 100 calls from 8 threads, each answered after 20 ms by its own client
# thread: they overlap, so far less than 100 x 20 ms.
code = """
import time
from concurrent.futures import ThreadPoolExecutor
t0 = time.perf_counter()
with ThreadPoolExecutor(8) as ex:
    total = sum(r["square"] for r in ex.map(lambda i: slow_square(i, delay=0.02), range(100)))
print(total, time.perf_counter() - t0 < 1.2)
try:
    explode(why="on purpose")
except ToolError as e:
    print(e)
"""
r = request(2, "execute", {"code": code, "session": "py"})
res = r.get("result", {})
check(res.get("status") == "success", "execute: %r" % r)
lines = res["output"].splitlines()
check(lines[0] == "%d True" % sum(i * i for i in range(100)), "parallel: %r" % lines)
check(lines[1] == "explode: boom: on purpose", "error: %r" % lines)
check(res["tool_calls_made"] == 101, "budget: %r" % res["tool_calls_made"])
check(len(calls) == 101 and all(c["params"]["session"] == "py" for c in calls), "calls")
check(not cancels, "nothing cancelled: %r" % cancels)

# A cell that ends with a call pending: the client is told.
r = request(3, "execute", {"code": "slow_square(3, delay=5)", "session": "py", "timeout": 1})
time.sleep(0.5)
check(len(cancels) == 1 and cancels[0] == calls[-1]["id"], "cancel: %r" % cancels)

proc.stdin.close()
check(proc.wait(30) == 0, "serve exit status")
print("ok")
