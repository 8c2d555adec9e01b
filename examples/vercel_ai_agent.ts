// A Vercel AI SDK agent with toolcell: the model writes one Python cell that calls the app's own tools.
// ci-expect: Orders over 100: A-1, A-3 (1110 EUR)
// Runs offline: MockLanguageModelV4 stands in for a real model (e.g. openai("gpt-5")).
// Run: npm install toolcell ai zod; compile with tsc (module nodenext); node vercel_ai_agent.js
import { generateText, isStepCount, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { toolcellTool } from "toolcell/ai";

const ORDERS: Record<string, number> = { "A-1": 120.0, "A-2": 35.5, "A-3": 990.0 };
const tools = {
  list_orders: tool({ description: "Ids of all orders.", inputSchema: z.object({}), execute: async () => Object.keys(ORDERS).sort() }),
  order_total: tool({
    description: "One order's total, in EUR.",
    inputSchema: z.object({ id: z.string().describe('The order id, like "A-1".') }),
    execute: async ({ id }) => ORDERS[id],
  }),
};

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
                outputTokens: { total: 1, text: 1, reasoning: undefined } };
const code = "big = [o for o in list_orders() if order_total(id=o) > 100]\nprint(', '.join(big), f'({sum(map(order_total, big)):g} EUR)')";
const model = new MockLanguageModelV4({
  doGenerate: async ({ prompt, tools: offered }) => {
    const last = prompt[prompt.length - 1];
    if (last.role !== "tool") { // step 1: the model writes code against the tool's description
      const described = offered?.find((t) => t.name === "execute_code");
      if (!described || !("description" in described) || !described.description?.includes("order_total(id: str)")) throw new Error("not described");
      return { content: [{ type: "tool-call", toolCallId: "c1", toolName: "execute_code", input: JSON.stringify({ code }) }],
               finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
    }
    const part = last.content[0]; // step 2: it reads the cell's output
    const seen = part.type === "tool-result" && part.output.type === "text" ? part.output.value : "?";
    return { content: [{ type: "text", text: `Orders over 100: ${seen}` }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
  },
});

const execute_code = await toolcellTool({ tools, conversationId: "demo", config: { tools: { enabled: [] } } });
const { text } = await generateText({ model, tools: { execute_code }, stopWhen: isStepCount(3), prompt: "Which orders are over 100 EUR?" });
console.log(text);
await execute_code.close();
