// toolcell/ai with the AI SDK's own mock model (MockLanguageModelV4 from
// ai/test) and a real `toolcell serve`. Run against the packed package:
// npm/scripts/test-ai.sh --tarball toolcell-X.tgz
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { generateText, streamText, isStepCount, tool, jsonSchema } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { Toolcell, ToolError } from "toolcell";
import { toolcellTool, resultText } from "toolcell/ai";

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** A model step that calls execute_code with `code`. */
function callCode(code, toolCallId = "call-1") {
  return {
    content: [{ type: "tool-call", toolCallId, toolName: "execute_code", input: JSON.stringify({ code }) }],
    finishReason: { unified: "tool-calls", raw: undefined },
    usage,
    warnings: [],
  };
}

/** A final model step. */
function say(text) {
  return { content: [{ type: "text", text }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
}

/** A mock model answering with `steps` in order (a function step gets the call's options). */
function scripted(...steps) {
  let i = 0;
  return new MockLanguageModelV4({
    doGenerate: async (options) => {
      const step = steps[i++];
      if (!step) throw new Error(`the model was called ${i} times; the test scripted ${steps.length}`);
      return typeof step === "function" ? step(options) : step;
    },
  });
}

/** The text of the last tool result in a prompt the model received. */
function lastToolText(prompt) {
  const message = [...prompt].reverse().find((m) => m.role === "tool");
  assert.ok(message, "the prompt has a tool message");
  const part = message.content.find((p) => p.type === "tool-result");
  assert.equal(part.output.type, "text");
  return part.output.value;
}

/** Whether process `pid` ended (or is a zombie) within `ms`. */
async function gone(pid, ms = 10000) {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
    try {
      if (!existsSync(`/proc/${pid}`) || readFileSync(`/proc/${pid}/stat`, "utf8").split(")").pop().trim().startsWith("Z")) return true;
    } catch {
      return true;
    }
  }
  return false;
}

const ORDERS = { "A-1": 120, "A-2": 35.5, "A-3": 155 };
const calls = [];
const listOrders = tool({
  description: "Ids of all orders.",
  inputSchema: jsonSchema({ type: "object", properties: {}, additionalProperties: false }),
  execute: async () => Object.keys(ORDERS),
});
const getOrder = tool({
  description: "One order, with its total in EUR.",
  inputSchema: z.object({ id: z.string().describe('The order id, like "A-1".') }),
  outputSchema: z.object({ id: z.string(), total: z.number() }),
  execute: async ({ id }, { toolCallId, messages, abortSignal }) => {
    calls.push({ id, pid: process.pid, toolCallId, messages, abortSignal });
    if (!(id in ORDERS)) throw new Error(`no order ${id}`);
    return { id, total: ORDERS[id] };
  },
});

let tc;
before(() => {
  tc = new Toolcell({ config: { tools: { enabled: [] }, execution: { max_tool_calls: 500, timeout: 60 } } });
});
after(async () => {
  await tc.close();
});

test("a cell loops over the app's tools; they run in Node and the model reads the sum", async () => {
  calls.length = 0;
  const execute_code = await toolcellTool({ toolcell: tc, tools: { list_orders: listOrders, get_order: getOrder }, session: "sum" });
  assert.match(execute_code.description, /get_order\(id: str\)/);
  assert.match(execute_code.description, /One order, with its total in EUR\./);
  assert.match(execute_code.description, /list_orders\(\)/);
  assert.doesNotMatch(execute_code.description, /read_file/); // built-ins off: only the app's tools
  const code = "total = sum(get_order(id=o)['total'] for o in list_orders())\nprint(total)";
  const model = scripted(callCode(code, "call-sum"), ({ prompt }) => say(`Total: ${lastToolText(prompt)}`));
  const r = await generateText({ model, tools: { execute_code }, stopWhen: isStepCount(3), prompt: "Sum all orders." });
  assert.equal(r.text, "Total: 310.5");
  assert.deepEqual(calls.map((c) => c.id), ["A-1", "A-2", "A-3"]);
  assert.ok(calls.every((c) => c.pid === process.pid));
  assert.deepEqual(calls.map((c) => c.toolCallId), ["call-sum.get_order.2", "call-sum.get_order.3", "call-sum.get_order.4"]);
  // the nested tools get the outer call's messages (the user's prompt)
  assert.equal(calls[0].messages[0].role, "user");
  assert.ok(calls[0].abortSignal instanceof AbortSignal);
  // the structured result stays in the SDK's tool results
  const [res] = r.steps[0].toolResults;
  assert.equal(res.toolName, "execute_code");
  assert.equal(res.output.status, "success");
  assert.equal(res.output.text, "310.5");
  assert.equal(res.output.result.tool_calls_made, 4);
  assert.equal(res.output.result.kernel.execution_count, 1);
});

test("a second generateText call (and a new adapter for the same conversation) sees the first cell's variables", async () => {
  const first = await toolcellTool({ toolcell: tc, tools: { get_order: getOrder }, conversationId: "chat-7" });
  assert.equal(first.session, "ai:chat-7");
  await generateText({
    model: scripted(callCode("big = get_order(id='A-3')['total']"), say("ok")),
    tools: { execute_code: first },
    stopWhen: isStepCount(3),
    prompt: "Remember the big order.",
  });
  let seen;
  const r = await generateText({
    model: scripted(callCode("print(big * 2)"), ({ prompt }) => say((seen = lastToolText(prompt)))),
    tools: { execute_code: first },
    stopWhen: isStepCount(3),
    prompt: "Double it.",
  });
  assert.equal(seen, "310");
  assert.equal(r.steps[0].toolResults[0].output.result.kernel.reused, true);
  // the next request of the same conversation builds its tool again: same kernel
  const again = await toolcellTool({ toolcell: tc, tools: { get_order: getOrder }, conversationId: "chat-7" });
  const r2 = await generateText({
    model: scripted(callCode("print(big + get_order(id='A-1')['total'])"), ({ prompt }) => say(lastToolText(prompt))),
    tools: { execute_code: again },
    stopWhen: isStepCount(3),
    prompt: "Add A-1.",
  });
  assert.equal(r2.text, "275");
  await again.close();
  assert.ok(!(await tc.sessions()).some((s) => s.session === "ai:chat-7"));
});

test("a failing app tool: its ToolError text reaches the model", async () => {
  const refuse = tool({
    description: "Refund an order.",
    inputSchema: z.object({ id: z.string() }),
    execute: async ({ id }) => {
      throw new ToolError(`refunds of ${id} need a manager`);
    },
  });
  const execute_code = await toolcellTool({ toolcell: tc, tools: { get_order: getOrder, refund: refuse }, session: "errors" });
  const code = [
    "try:",
    "    get_order(id='X-9')",
    "except ToolError as e:",
    "    print('caught:', e)",
    "refund(id='A-1')",
  ].join("\n");
  const model = scripted(callCode(code), say("Sorry."));
  await generateText({ model, tools: { execute_code }, stopWhen: isStepCount(3), prompt: "Refund A-1." });
  const seen = lastToolText(model.doGenerateCalls[1].prompt);
  assert.match(seen, /^caught: get_order: Error: no order X-9$/m);
  assert.match(seen, /ToolError: refund: refunds of A-1 need a manager/);
  assert.match(seen, /^status: error$/m);
  assert.match(seen, /^error: .*refunds of A-1 need a manager/m);
});

test("a nested tool gets its context from toolsContext.execute_code, and its schema's defaults", async () => {
  const seen = [];
  const convert = tool({
    description: "An order's total in a currency.",
    inputSchema: z.object({ id: z.string(), currency: z.string().default("EUR") }),
    contextSchema: z.object({ rates: z.record(z.string(), z.number()) }),
    execute: async ({ id, currency }, { context }) => {
      seen.push(currency);
      return ORDERS[id] * context.rates[currency];
    },
  });
  const execute_code = await toolcellTool({ toolcell: tc, tools: { convert }, session: "context" });
  const model = scripted(callCode("print(convert(id='A-1'), convert(id='A-1', currency='USD'))"), ({ prompt }) => say(lastToolText(prompt)));
  const r = await generateText({
    model,
    tools: { execute_code },
    toolsContext: { execute_code: { convert: { rates: { EUR: 1, USD: 2 } } } },
    stopWhen: isStepCount(3),
    prompt: "Convert.",
  });
  assert.equal(r.text, "120 240");
  assert.deepEqual(seen, ["EUR", "USD"]);
  // without its context the call fails in the cell, saying where the context goes
  const r2 = await generateText({ model: scripted(callCode("convert(id='A-1')"), ({ prompt }) => say(lastToolText(prompt))), tools: { execute_code }, stopWhen: isStepCount(3), prompt: "Convert." });
  assert.match(r2.text, /ToolError: convert: invalid context: Invalid input: expected object, received undefined \(.*toolsContext\.execute_code\.convert\)$/m);
});

test("streamText: preliminary results carry the output so far, then the final result", async () => {
  const execute_code = await toolcellTool({ toolcell: tc, session: "stream" });
  const code = "import time\nfor i in range(3):\n    print('step', i, flush=True)\n    time.sleep(0.3)";
  let step = 0;
  const model = new MockLanguageModelV4({
    doStream: async () => {
      const chunks =
        step++ === 0
          ? [
              { type: "tool-call", toolCallId: "call-s", toolName: "execute_code", input: JSON.stringify({ code }) },
              { type: "finish", finishReason: { unified: "tool-calls", raw: undefined }, usage },
            ]
          : [
              { type: "text-start", id: "t" },
              { type: "text-delta", id: "t", delta: "done" },
              { type: "text-end", id: "t" },
              { type: "finish", finishReason: { unified: "stop", raw: undefined }, usage },
            ];
      return { stream: new ReadableStream({ start(c) { for (const x of chunks) c.enqueue(x); c.close(); } }) };
    },
  });
  const result = streamText({ model, tools: { execute_code }, stopWhen: isStepCount(3), prompt: "Count." });
  const results = [];
  for await (const part of result.fullStream) if (part.type === "tool-result") results.push(part);
  assert.equal(await result.text, "done");
  // (the SDK also sends the last value yielded as a preliminary result, then as the final one)
  const running = results.filter((p) => p.preliminary && p.output.status === "running");
  const final = results.filter((p) => !p.preliminary);
  assert.ok(running.length >= 2, `running results: ${running.length}`);
  assert.ok(running.every((p) => p.output.result === undefined));
  assert.equal(running[0].output.text, "step 0\n");
  for (let i = 1; i < running.length; i++) assert.ok(running[i].output.text.startsWith(running[i - 1].output.text));
  assert.ok(results.indexOf(running.at(-1)) < results.indexOf(final[0]));
  assert.equal(final.length, 1);
  assert.equal(final[0].output.status, "success");
  assert.equal(final[0].output.text, "step 0\nstep 1\nstep 2");
});

test("abort: the cell is cancelled, a waiting app tool is aborted, the kernel keeps its state", async () => {
  let ac;
  const aborted = [];
  const wait = tool({
    description: "Waits for a human.",
    inputSchema: z.object({}),
    execute: (_input, { abortSignal }) =>
      new Promise((resolve) => {
        abortSignal.addEventListener("abort", () => {
          aborted.push(abortSignal.reason?.name);
          resolve("too late");
        });
        ac.abort(); // the user hits stop while the tool waits
      }),
  });
  const execute_code = await toolcellTool({ toolcell: tc, tools: { wait_for_human: wait }, session: "abort" });
  await tc.execute("state = 'kept'", { session: "abort" });
  const code = "wait_for_human()\nimport time\ntime.sleep(30)";
  const t0 = Date.now();
  // One step: generateText resolves with the cancelled cell's result.
  ac = new AbortController();
  const r = await generateText({ model: scripted(callCode(code)), tools: { execute_code }, abortSignal: ac.signal, prompt: "Wait." });
  const out = r.steps[0].toolResults[0].output;
  assert.equal(out.status, "interrupted");
  assert.match(out.text, /^status: interrupted$/m);
  assert.deepEqual(aborted, ["AbortError"]);
  // More steps to go: generateText rejects with AbortError (the mock's next call fails as a provider's fetch would).
  ac = new AbortController();
  const provider = ({ abortSignal }) => {
    abortSignal?.throwIfAborted();
    return say("never");
  };
  await assert.rejects(
    generateText({ model: scripted(callCode(code), provider), tools: { execute_code }, abortSignal: ac.signal, stopWhen: isStepCount(3), prompt: "Wait." }),
    (e) => e.name === "AbortError",
  );
  assert.equal(aborted.length, 2);
  assert.equal((await tc.execute("print(state)", { session: "abort" })).output, "kept\n");
  assert.ok(Date.now() - t0 < 20000, "the cells were cancelled, not run to their end");
});

test("a tool timeout of the SDK interrupts the cell, and the model reads it", async () => {
  const execute_code = await toolcellTool({ toolcell: tc, session: "tool-timeout", stream: false });
  const model = scripted(callCode("import time\nprint('working', flush=True)\ntime.sleep(30)"), say("gave up"));
  const t0 = Date.now();
  const r = await generateText({ model, tools: { execute_code }, stopWhen: isStepCount(3), timeout: { toolMs: 1500 }, prompt: "Work." });
  assert.equal(r.text, "gave up");
  assert.ok(Date.now() - t0 < 15000);
  const seen = lastToolText(model.doGenerateCalls[1].prompt);
  assert.match(seen, /^working$/m); // the output so far
  assert.match(seen, /^status: interrupted$/m);
  assert.equal((await tc.execute("print('free')", { session: "tool-timeout" })).output, "free\n");
});

test("close() of a tool that started its own client ends the server", async () => {
  const execute_code = await toolcellTool({ config: { tools: { enabled: [] } }, tools: { get_order: getOrder } });
  assert.match(execute_code.session, /^ai:[0-9a-f-]{36}$/);
  const pid = execute_code.toolcell.pid;
  const r = await generateText({
    model: scripted(callCode("print(get_order(id='A-2')['total'])"), ({ prompt }) => say(lastToolText(prompt))),
    tools: { execute_code },
    stopWhen: isStepCount(3),
    prompt: "A-2?",
  });
  assert.equal(r.text, "35.5");
  await execute_code.close();
  await execute_code.close(); // twice is fine
  assert.ok(await gone(pid), `toolcell serve (pid ${pid}) still runs`);
});

test("tools a cell cannot call are refused up front, saying what to do", async () => {
  const clientSide = tool({ description: "Ask the user.", inputSchema: z.object({ q: z.string() }) });
  await assert.rejects(
    toolcellTool({ toolcell: tc, tools: { ask_user: clientSide }, session: "bad" }),
    (e) => e instanceof TypeError && /tools\.ask_user has no execute function/.test(e.message),
  );
});

test("needsApproval: always is refused up front; a policy is asked per call and a call it flags never runs", async () => {
  const always = tool({
    description: "Refund.",
    inputSchema: z.object({ amount: z.number() }),
    needsApproval: true,
    execute: async () => "done",
  });
  await assert.rejects(
    toolcellTool({ toolcell: tc, tools: { refund: always }, session: "approve-a" }),
    (e) => e instanceof TypeError && /tools\.refund needs approval/.test(e.message),
  );
  const ran = [];
  const asked = [];
  const refund = tool({
    description: "Refund.",
    inputSchema: z.object({ amount: z.number() }),
    needsApproval: async ({ amount }, { toolCallId }) => {
      asked.push(toolCallId);
      return amount > 100;
    },
    execute: async ({ amount }) => {
      ran.push(amount);
      return `refunded ${amount}`;
    },
  });
  const execute_code = await toolcellTool({ toolcell: tc, tools: { refund }, session: "approve-b" });
  const code = ["print(refund(amount=5))", "try:", "    refund(amount=500)", "except ToolError as e:", "    print('refused:', e)"].join("\n");
  const model = scripted(callCode(code), say("ok"));
  await generateText({ model, tools: { execute_code }, stopWhen: isStepCount(3), prompt: "Refund." });
  const seen = lastToolText(model.doGenerateCalls[1].prompt);
  assert.match(seen, /^refunded 5$/m);
  assert.match(seen, /^refused: refund: refund needs approval for these arguments/m);
  assert.deepEqual(ran, [5]);
  assert.equal(asked.length, 2);
  await execute_code.close();
});

test("resultText reads like the Python integrations'", () => {
  const base = { output: "", status: "success" };
  assert.equal(resultText(base), "(no output)");
  assert.equal(resultText({ ...base, output: "42" }), "42");
  assert.equal(
    resultText({ output: "x\n", status: "error", error: "NameError: y", hint: "define y", warning: "slow" }),
    "x\nstatus: error\nerror: NameError: y\nhint: define y\nwarning: slow",
  );
});

// ---------------------------------------------------------------- many conversations, shared clients, lifecycle

function tenTools(calls) {
  const tools = {};
  for (let k = 0; k < 10; k++) {
    tools[`add${k}`] = tool({
      description: `x plus ${k}.`,
      inputSchema: z.object({ x: z.number() }),
      execute: async ({ x }) => {
        calls.push(k);
        return x + k;
      },
    });
  }
  return tools;
}

test("many conversations on one client: each builds its tool per request, the tools are registered once", async () => {
  const client = new Toolcell({ config: { tools: { enabled: [] } } });
  try {
    const calls = [];
    const tools = tenTools(calls);
    for (let i = 0; i < 130; i++) {
      // 1300 tools, were they registered per conversation (the server holds 1024 per connection)
      const execute_code = await toolcellTool({ toolcell: client, tools, conversationId: `c${i}`, stream: false });
      const out = await execute_code.execute({ code: `print(add${i % 10}(x=${i}))` }, { toolCallId: `t${i}`, messages: [] });
      assert.equal(out.text, String(i + (i % 10)), `conversation ${i}`);
    }
    assert.equal(calls.length, 130);
    for (let k = 0; k < 10; k++) assert.ok(client.hasTool(`add${k}`));
    assert.ok(!client.hasTool("add0", { session: "ai:c0" }));
  } finally {
    await client.close();
  }
});

test("adapters sharing a client: a name with two definitions stays each adapter's", async () => {
  const a = await toolcellTool({
    toolcell: tc,
    session: "share-a",
    stream: false,
    tools: { lookup: tool({ description: "In A.", inputSchema: z.object({ id: z.string() }), execute: async ({ id }) => `A:${id}` }) },
  });
  const b = await toolcellTool({
    toolcell: tc,
    session: "share-b",
    stream: false,
    tools: {
      lookup: tool({
        description: "In B, another definition.",
        inputSchema: z.object({ id: z.string(), upper: z.boolean().default(false) }),
        execute: async ({ id, upper }) => `B:${upper ? id.toUpperCase() : id}`,
      }),
    },
  });
  assert.match(b.description, /lookup\(id: str, upper: bool = False\)/);
  const opts = { toolCallId: "x", messages: [] };
  assert.equal((await a.execute({ code: "print(lookup(id='x'))" }, opts)).text, "A:x");
  assert.equal((await b.execute({ code: "print(lookup(id='x', upper=True))" }, opts)).text, "B:X");
  assert.equal((await a.execute({ code: "print(lookup(id='y'))" }, opts)).text, "A:y");
  await a.close();
  await b.close();
  assert.ok(!tc.hasTool("lookup"));
});

test("adapters sharing a session take turns: each cell reaches its own tools, with its own call's options", async () => {
  const client = new Toolcell({ config: { tools: { enabled: [] } } });
  try {
    // the app's own lookup, for every session: adapter A's is registered for its cells only (it awaits that)
    client.tool("lookup", { type: "object", properties: { q: { type: "string" } }, required: ["q"] }, async ({ q }) => `APP lookup(${q})`);
    const lookup = tool({ description: "The adapter's lookup.", inputSchema: z.object({ q: z.string() }), execute: async ({ q }) => `ADAPTER lookup(${q})` });
    const whoami = (who) => tool({ description: "Who.", inputSchema: z.object({}), execute: async (_i, o) => `${who}:${o.toolCallId}` });
    const A = await toolcellTool({ toolcell: client, session: "turns", stream: false, tools: { lookup, whoami: whoami("A") } });
    const B = await toolcellTool({
      toolcell: client,
      session: "turns",
      stream: false,
      tools: { whoami: whoami("B"), b_only: tool({ description: "B's.", inputSchema: z.object({}), execute: async () => "b" }) },
    });
    const [a, b] = await Promise.all([
      A.execute({ code: "import time; time.sleep(0.3); print(whoami(), lookup(q='a'))" }, { toolCallId: "A-call", messages: [] }),
      B.execute({ code: "print(whoami(), b_only())" }, { toolCallId: "B-call", messages: [] }),
    ]);
    assert.equal(a.text, "A:A-call.whoami.1 ADAPTER lookup(a)");
    assert.equal(b.text, "B:B-call.whoami.1 b");
    // two cells of one adapter at once (one step's parallel calls): each keeps the adapter's lookup
    const [c1, c2] = await Promise.all([
      A.execute({ code: "print(lookup(q='first'))" }, { toolCallId: "c1", messages: [] }),
      A.execute({ code: "import time; time.sleep(0.3); print(lookup(q='second'))" }, { toolCallId: "c2", messages: [] }),
    ]);
    assert.equal(c1.text, "ADAPTER lookup(first)");
    assert.equal(c2.text, "ADAPTER lookup(second)");
    assert.equal((await client.execute("print(lookup(q='app'))", { session: "turns" })).output, "APP lookup(app)\n");
  } finally {
    await client.close();
  }
});

test("a tool the app registered for one session is never replaced by an adapter's", async () => {
  const client = new Toolcell({ config: { tools: { enabled: [] } } });
  try {
    client.tool("f", { type: "object", properties: { x: { type: "number" } }, required: ["x"] }, async ({ x }) => -x);
    client.tool("f", { type: "object", properties: { x: { type: "number" } }, required: ["x"] }, async ({ x }) => x * 1000, { session: "mine" });
    const f = tool({ description: "Adds one.", inputSchema: z.object({ x: z.number() }), execute: async ({ x }) => x + 1 });
    const mine = await toolcellTool({ toolcell: client, session: "mine", stream: false, tools: { f } });
    const other = await toolcellTool({ toolcell: client, session: "other", stream: false, tools: { f } });
    const opts = { toolCallId: "f", messages: [] };
    assert.equal((await other.execute({ code: "print(f(x=2))" }, opts)).text, "3");
    assert.equal((await mine.execute({ code: "print(f(x=2))" }, opts)).text, "2000");
    assert.ok(client.hasTool("f", { session: "mine" }));
    assert.equal((await client.execute("print(f(x=2))", { session: "mine" })).output, "2000\n");
  } finally {
    await client.close();
  }
});

test("a call aborted while it waits for another cell of its session runs nothing and stops nothing", async () => {
  const a = await toolcellTool({ toolcell: tc, session: "abort-turns", stream: false });
  const b = await toolcellTool({ toolcell: tc, session: "abort-turns", stream: false });
  const opts = { toolCallId: "t", messages: [] };
  await a.execute({ code: "ran = []" }, opts);
  const slow = a.execute({ code: "import time; time.sleep(1.0); print('a done')" }, opts);
  await new Promise((r) => setTimeout(r, 300));
  const ac = new AbortController();
  const waiting = b.execute({ code: "ran.append('b')" }, { ...opts, abortSignal: ac.signal });
  await new Promise((r) => setTimeout(r, 100));
  ac.abort();
  await assert.rejects(waiting, (e) => e.name === "AbortError");
  assert.equal((await slow).text, "a done");
  assert.equal((await a.execute({ code: "print(ran)" }, opts)).text, "[]");
});

test("a chatty cell's preliminary results carry only the newest output", async () => {
  const execute_code = await toolcellTool({ toolcell: tc, session: "chatty", streamTail: 1000 });
  const code = "import sys, time\nfor i in range(40):\n    print(str(i % 10) * 999, flush=True)\n    time.sleep(0.01)";
  const results = [];
  for await (const out of execute_code.execute({ code }, { toolCallId: "c", messages: [] })) results.push(out);
  const running = results.filter((r) => r.status === "running");
  assert.ok(running.length >= 1);
  for (const r of running) assert.ok(r.text.length <= 1000 + 60, `a preliminary result of ${r.text.length} characters`);
  assert.ok(running.some((r) => /^\[\.\.\. \d+ characters before these \.\.\.\]\n/.test(r.text)));
  const last = results.at(-1);
  assert.equal(last.status, "success");
  assert.ok(last.text.length > 1000); // the final result has the whole (capped) output
});

test("a long-lived abort signal collects no listeners, from cells or from nested calls", async () => {
  const { getEventListeners } = await import("node:events");
  const ac = new AbortController();
  const ping = tool({ description: "Ping.", inputSchema: z.object({}), execute: async (_i, { abortSignal }) => abortSignal.aborted });
  const savedAny = AbortSignal.any;
  AbortSignal.any = undefined; // the fallback older Nodes take
  try {
    const execute_code = await toolcellTool({ toolcell: tc, session: "listeners", stream: false, tools: { ping } });
    for (let i = 0; i < 20; i++) {
      const out = await execute_code.execute({ code: "print(ping())" }, { toolCallId: `l${i}`, messages: [], abortSignal: ac.signal });
      assert.equal(out.text, "False");
    }
    for (let i = 0; i < 20; i++) await tc.execute("1", { session: "listeners", signal: ac.signal });
    assert.equal(getEventListeners(ac.signal, "abort").length, 0);
  } finally {
    AbortSignal.any = savedAny;
  }
});

test("a tool dropped without close() ends the server it started", async () => {
  const v8 = await import("node:v8");
  const vm = await import("node:vm");
  v8.setFlagsFromString("--expose_gc");
  const gc = vm.runInNewContext("gc");
  let pid;
  await (async () => {
    const execute_code = await toolcellTool({ config: { tools: { enabled: [] } }, stream: false });
    pid = execute_code.toolcell.pid;
    assert.equal((await execute_code.execute({ code: "print(1)" }, { toolCallId: "d", messages: [] })).text, "1");
  })();
  for (let i = 0; i < 20 && !(await gone(pid, 100)); i++) {
    gc();
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(await gone(pid), `toolcell serve (pid ${pid}) still runs`);
});
