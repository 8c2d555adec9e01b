// The cost of toolcell/ai: a cell making 100 calls to a host-side tool,
// (a) through the adapter: generateText with the AI SDK's mock model calling
//     execute_code, the tool an AI SDK `tool({inputSchema: z.object(...), execute})`;
// (b) plain: `tc.execute` with the same function registered by `tc.tool`.
// Warm-up, then the median of RUNS runs each (interleaved); prints one JSON line
// {"framework","version","plain_ms","integration_ms","ratio","runs"}.
//
// Run from a directory where the toolcell package, ai and zod are installed:
//   npm install ./toolcell-X.tgz ai@7.0.173 zod@4.6.7 && node benches/integrations/bench_vercel_ai.mjs
// (env RUNS, default 15)
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

// Packages are looked up from the current directory, not from this file's.
const req = createRequire(join(process.cwd(), "bench.js"));
const load = (path) => import(pathToFileURL(path).href);
const toolcellDir = dirname(req.resolve("toolcell/package.json"));
const { Toolcell } = await load(join(toolcellDir, "dist/esm/index.js"));
const { toolcellTool } = await load(join(toolcellDir, "dist/esm/ai.js"));
const { generateText, tool } = await load(req.resolve("ai"));
const { MockLanguageModelV4 } = await load(req.resolve("ai/test"));
const { z } = await load(req.resolve("zod"));
const aiVersion = JSON.parse(readFileSync(req.resolve("ai/package.json"), "utf8")).version;

const RUNS = Number(process.env.RUNS ?? 15);
const WARMUP = 3;
const CODE = "total = 0\nfor i in range(100):\n    total += get_order(id=f'A-{i}')['total']\nprint(total)";
const EXPECT = "4950\n";
const order = (id) => ({ id, total: Number(id.slice(2)) });

const tc = new Toolcell({ config: { tools: { enabled: [] }, execution: { max_tool_calls: 500 } } });
tc.tool("get_order", { type: "object", description: "One order.", properties: { id: { type: "string" } }, required: ["id"] }, ({ id }) => order(id));

const getOrder = tool({
  description: "One order.",
  inputSchema: z.object({ id: z.string() }),
  execute: async ({ id }) => order(id),
});
const execute_code = await toolcellTool({ toolcell: tc, tools: { get_order: getOrder }, session: "bench-ai" });
const usage = { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } };
const model = new MockLanguageModelV4({
  doGenerate: async () => ({
    content: [{ type: "tool-call", toolCallId: "c", toolName: "execute_code", input: JSON.stringify({ code: CODE }) }],
    finishReason: { unified: "tool-calls", raw: undefined },
    usage,
    warnings: [],
  }),
});

async function plain() {
  const r = await tc.execute(CODE, { session: "bench-plain" });
  if (r.output !== EXPECT) throw new Error(`plain cell printed ${JSON.stringify(r.output)}`);
}
async function integration() {
  const r = await generateText({ model, tools: { execute_code }, prompt: "Sum the orders." });
  const out = r.steps[0].toolResults[0]?.output;
  if (out?.text !== EXPECT.trim()) throw new Error(`adapter cell gave ${JSON.stringify(out)}`);
}
async function timed(fn) {
  const t0 = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t0) / 1e6;
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

for (let i = 0; i < WARMUP; i++) {
  await plain();
  await integration();
}
const p = [];
const a = [];
for (let i = 0; i < RUNS; i++) {
  // alternate which goes first, so drift of the machine hits both alike
  if (i % 2) {
    p.push(await timed(plain));
    a.push(await timed(integration));
  } else {
    a.push(await timed(integration));
    p.push(await timed(plain));
  }
}
await execute_code.close();
await tc.close();
const plain_ms = median(p);
const integration_ms = median(a);
console.log(
  JSON.stringify({
    framework: "vercel-ai",
    version: aiVersion,
    plain_ms: Math.round(plain_ms * 10) / 10,
    integration_ms: Math.round(integration_ms * 10) / 10,
    ratio: Math.round((integration_ms / plain_ms) * 1000) / 1000,
    runs: RUNS,
  }),
);
