// Tests of the installed `toolcell` package (ESM), against a real `toolcell serve`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { Toolcell, ToolError, RPCError, ServerExited, findToolcellBin } from "toolcell";

const config = { execution: { max_tool_calls: 500, timeout: 60 } };

function gone(pid, withinMs = 10000) {
  const end = Date.now() + withinMs;
  while (Date.now() < end) {
    if (!existsSync(`/proc/${pid}`)) return true;
    try {
      if (readFileSync(`/proc/${pid}/stat`, "utf8").split(")").pop().trim().startsWith("Z")) return true;
    } catch {
      return true;
    }
    spawnSync("sleep", ["0.05"]);
  }
  return false;
}

async function withClient(fn, cfg = config) {
  const tc = new Toolcell({ config: cfg });
  try {
    await fn(tc);
  } finally {
    await tc.close();
  }
}

test("the binary comes with the package", () => {
  if (process.env.TOOLCELL) return;
  const bin = findToolcellBin();
  assert.match(bin, /node_modules\/toolcell\/bin\/toolcell$/);
  const out = spawnSync(bin, ["--version"], { encoding: "utf8" });
  const pkg = JSON.parse(readFileSync(new URL("../node_modules/toolcell/package.json", import.meta.url)));
  assert.equal(out.stdout.trim(), `toolcell ${pkg.version}`);
  // npm links it as node_modules/.bin/toolcell (`npx toolcell ...`)
  const linked = spawnSync(new URL("../node_modules/.bin/toolcell", import.meta.url).pathname, ["--version"], { encoding: "utf8" });
  assert.equal(linked.stdout.trim(), `toolcell ${pkg.version}`);
});

test("execute returns the result and keeps state", () =>
  withClient(async (tc) => {
    let r = await tc.execute("x = 6 * 7\nprint(x)");
    assert.equal(r.status, "success");
    assert.equal(r.output, "42\n");
    assert.equal(r.kernel.execution_count, 1);
    r = await tc.execute("x + 1");
    assert.equal(r.output, "43\n");
    assert.equal(r.kernel.reused, true);
    r = await tc.execute("1/0");
    assert.equal(r.status, "error");
    assert.match(r.error, /ZeroDivisionError/);
    await assert.rejects(tc.execute(""), (e) => e instanceof RPCError && e.code === -32602);
  }));

test("stream delivers chunks before the result", () =>
  withClient(async (tc) => {
    const chunks = [];
    const r = await tc.execute("import time\nfor i in range(3):\n    print('step', i, flush=True); time.sleep(0.2)", {
      stream: (c) => chunks.push(c),
    });
    assert.equal(r.status, "success");
    assert.equal(chunks.map((c) => c.text).join(""), "step 0\nstep 1\nstep 2\n");
    assert.ok(chunks.length >= 2);
    assert.ok(chunks.every((c) => c.session === "default" && c.stream === "stdout"));
  }));

test("tools: sync, async, errors, and the model's schema", () =>
  withClient(async (tc) => {
    const orders = { "A-1": 120, "A-2": 35.5 };
    tc.tool("order_total", { type: "object", description: "One order's total.",
      properties: { id: { type: "string" } }, required: ["id"] }, ({ id }) => orders[id]);
    tc.tool("list-orders", { description: "Ids of all orders.", input_schema: { type: "object" } },
      async () => { await new Promise((r) => setTimeout(r, 20)); return Object.keys(orders); });
    tc.tool("explode", { type: "object", properties: { why: { type: "string" } } }, ({ why }) => { throw new Error("boom " + why); });
    tc.tool("refuse", { type: "object" }, () => { throw new ToolError("not allowed"); });
    const code = `
print(sum(order_total(o) for o in list_orders()))
for f in (lambda: explode(why="x"), refuse):
    try:
        f()
    except ToolError as e:
        print(e)
`;
    const r = await tc.execute(code);
    assert.equal(r.status, "success", r.output);
    assert.deepEqual(r.output.split("\n"), ["155.5", "explode: Error: boom x", "refuse: not allowed", ""]);
    assert.equal(r.tool_calls_made, 5);
    const schema = await tc.schema("anthropic");
    assert.equal(schema.name, "execute_code");
    assert.match(schema.description, /order_total\(id: str\)/);
    assert.match(schema.description, /One order's total\./);
  }));

test("a result with a lone surrogate is answered at once with an error, not left unanswered", () =>
  withClient(async (tc) => {
    tc.tool("lone", { type: "object" }, () => "abc\ud800");
    tc.tool("lone_key", { type: "object" }, () => ({ ["k\udfff"]: 1 }));
    tc.tool("pair", { type: "object" }, () => "ok \ud83d\ude00 \\ud800"); // a pair, and a backslash before "ud800"
    tc.tool("bad_error", { type: "object" }, () => { throw new Error("bad \ud800 text"); });
    tc.tool("nan", { type: "object" }, () => [NaN, Infinity]); // JSON.stringify writes null
    const code = `
for f in (lone, lone_key, pair, bad_error, nan):
    try:
        print(f())
    except ToolError as e:
        print(e)
`;
    const start = Date.now();
    const r = await tc.execute(code, { timeout: 20 });
    assert.ok(Date.now() - start < 8000, r.output);
    const lines = r.output.split("\n");
    assert.match(lines[0], /^lone: the tool returned text that is not valid Unicode: a lone surrogate/);
    assert.match(lines[1], /^lone_key: the tool returned text that is not valid Unicode/);
    assert.equal(lines[2], "ok \ud83d\ude00 \\ud800");
    assert.equal(lines[3], "bad_error: Error: bad \ufffd text");
    assert.equal(lines[4], "[None, None]");
  }));

test("calls from threads are served concurrently", () =>
  withClient(async (tc) => {
    tc.tool("slow_square", { type: "object", properties: { x: { type: "integer" } }, required: ["x"] },
      async ({ x }) => { await new Promise((r) => setTimeout(r, 200)); return x * x; });
    const r = await tc.execute(`
import time
from concurrent.futures import ThreadPoolExecutor
t0 = time.perf_counter()
with ThreadPoolExecutor(8) as ex:
    print(sum(ex.map(slow_square, range(16))), time.perf_counter() - t0 < 2.0)
`);
    assert.equal(r.output, "1240 True\n");
  }));

test("a cancelled call is aborted and its answer dropped", () =>
  withClient(async (tc) => {
    let aborted = false;
    tc.tool("forever", { type: "object" }, (_args, ctx) => new Promise((resolve) => {
      ctx.signal.addEventListener("abort", () => { aborted = true; resolve("late"); });
    }));
    const r = await tc.execute("forever()", { timeout: 1 });
    assert.equal(r.status, "error");
    assert.match(r.output, /was cancelled/);
    assert.equal(aborted, true);
    assert.equal(tc.cancelledCalls.length, 1);
    assert.equal((await tc.execute("print('still fine')")).output, "still fine\n");
  }));

test("an AbortSignal cancels the cell", () =>
  withClient(async (tc) => {
    await tc.execute("state = 1");
    const ac = new AbortController();
    const p = tc.execute("import time\nprint('go', flush=True)\ntime.sleep(30)", { stream: () => ac.abort(), signal: ac.signal });
    const r = await p;
    assert.equal(r.status, "interrupted");
    assert.equal((await tc.execute("print(state)")).output, "1\n");
  }));

test("sessions, interrupt and shutdownSession", () =>
  withClient(async (tc) => {
    await tc.execute("y = 1", { session: "s" });
    let started;
    const ready = new Promise((r) => (started = r));
    const p = tc.execute("import time\nprint('sleeping', flush=True)\ntime.sleep(30)", { session: "s", stream: () => started() });
    await ready;
    assert.equal(await tc.interrupt("s"), 1);
    assert.equal((await p).status, "interrupted");
    assert.deepEqual((await tc.sessions()).map((s) => s.session), ["s"]);
    assert.equal(await tc.shutdownSession("s"), 1);
  }));

test("close ends the server and its kernels", async () => {
  const tc = new Toolcell();
  await tc.execute("1");
  // The kernel's pid on this host (inside its sandbox it is 2).
  const kernel = (await tc.sessions())[0].pid;
  const pid = tc.pid;
  assert.equal(await tc.close(), 0);
  assert.ok(gone(pid) && gone(kernel));
  await assert.rejects(tc.execute("1"), ServerExited);
});

test("a script that never closes still exits, and ends the server", () => {
  const script = `
import { Toolcell } from "toolcell";
const tc = new Toolcell();
await tc.execute("1");
console.log(tc.pid, (await tc.sessions())[0].pid);
`;
  const out = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    encoding: "utf8", timeout: 30000, cwd: new URL(".", import.meta.url).pathname,
  });
  assert.equal(out.status, 0, out.stderr);
  const [serve, kernel] = out.stdout.trim().split(" ").map(Number);
  assert.ok(gone(serve) && gone(kernel));
});

test("a server that cannot start says why", async () => {
  const tc = new Toolcell({ config: { execution: { no_such_key: 1 } } });
  await assert.rejects(tc.execute("1"), (e) => e instanceof ServerExited && /status 2/.test(e.message) && /no_such_key/.test(e.message));
  assert.equal(await tc.close(), 2);
});

// A cell that can write into the server's stdout (a root host without the sandbox, or any host
// before it made itself non-dumpable) can forge lines the client reads: neither a guessed id nor
// a tool call for a session with no running cell may be taken as the server's. This attacks the
// layer under the sandbox, so it runs with the sandbox off; sandboxed, the server is not in the
// cell's view ("a sandboxed cell cannot reach the server's descriptors").
// Node gives the server a socket for stdout, which open() through /proc refuses (ENXIO):
// a root cell takes a copy of the descriptor itself (pidfd_getfd), as an attacker would.
const FORGE = `
import ctypes, json, os
host = os.getppid()
def host_stdout():
    try:
        return os.open(f"/proc/{host}/fd/1", os.O_WRONLY)
    except OSError:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.syscall(438, os.pidfd_open(host), 1, 0)  # pidfd_getfd
        if fd < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
        return fd
out = host_stdout()
def forge(msg):
    os.write(out, (json.dumps(msg) + "\\n").encode())
`;

test("review 01: forged tool calls and results from a cell are refused", { skip: process.getuid() !== 0 && "a non-root cell cannot open the non-dumpable server's fds" }, () =>
  withClient(async (tc) => {
    const ran = [];
    tc.tool("transfer", { type: "object", properties: { amount: { type: "integer" } } }, ({ amount }) => { ran.push(amount); return "sent"; }, { session: "victim" });
    assert.equal((await tc.execute("print(transfer(amount=1))", { session: "victim" })).output, "sent\n");
    const victim = tc.execute("import time; time.sleep(3); print('real')", { session: "victim2" });
    const code = FORGE + `
forge({'jsonrpc': '2.0', 'id': 'forged-1', 'method': 'tool/call', 'params': {'session': 'victim', 'name': 'transfer', 'arguments': {'amount': 1000}}})
for i in range(1, 2000):
    forge({'jsonrpc': '2.0', 'id': i, 'result': {'status': 'success', 'output': 'FORGED', 'session': 'victim2'}})
import time; time.sleep(1.0)
print('forged')
`;
    const r = await tc.execute(code, { session: "attacker" });
    assert.equal(r.output, "forged\n");
    assert.deepEqual(ran, [1], "a forged tool/call ran the victim's tool outside any cell");
    assert.equal((await victim).output, "real\n");
  }, { ...config, sandbox: { mode: "off" } }));

test("a sandboxed cell cannot reach the server's descriptors", () =>
  withClient(async (tc) => {
    const r = await tc.execute(FORGE + "print('forged')");
    // Its parent is the sandbox's init, whose descriptors are closed and
    // which it may not trace: nothing of the server's is in reach.
    assert.equal(r.status, "error", r.output);
    assert.doesNotMatch(r.output, /forged/);
  }));
