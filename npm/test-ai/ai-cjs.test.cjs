// require("toolcell/ai"): the CommonJS build of the adapter (Node loads the ESM-only `ai` through require).
const { test } = require("node:test");
const assert = require("node:assert/strict");
const { generateText, isStepCount, tool, jsonSchema } = require("ai");
const { MockLanguageModelV4 } = require("ai/test");
const { Toolcell } = require("toolcell");
const { toolcellTool } = require("toolcell/ai");

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

test("require('toolcell/ai') runs a cell that calls an app tool", async () => {
  const tc = new Toolcell({ config: { tools: { enabled: [] } } });
  try {
    const double = tool({
      description: "Twice n.",
      inputSchema: jsonSchema({ type: "object", properties: { n: { type: "number" } }, required: ["n"] }),
      execute: async ({ n }) => 2 * n,
    });
    const execute_code = await toolcellTool({ toolcell: tc, tools: { double }, session: "cjs" });
    const steps = [
      { content: [{ type: "tool-call", toolCallId: "c", toolName: "execute_code", input: JSON.stringify({ code: "print(double(n=21))" }) }],
        finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] },
      { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] },
    ];
    const r = await generateText({ model: new MockLanguageModelV4({ doGenerate: steps }), tools: { execute_code }, stopWhen: isStepCount(3), prompt: "2*21" });
    assert.equal(r.steps[0].toolResults[0].output.text, "42");
    assert.equal(r.text, "done");
  } finally {
    await tc.close();
  }
});
