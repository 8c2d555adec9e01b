// An agent loop with toolcell: the model writes code that calls your functions.
// `model()` stands in for an LLM API call (no network): it gets the `execute_code`
// tool, whose description lists `list_orders` and `order_total`, and answers with code.
// Run: npm install toolcell (or the built tarball); compile with tsc; node ts_agent.js
import { Toolcell } from "toolcell";

const ORDERS: Record<string, number> = { "A-1": 120.0, "A-2": 35.5, "A-3": 990.0 };
type Reply = { type: "tool_use"; name: string; input: { code: string } } | { type: "text"; text: string };
type Message = { role: "user" | "tool"; content: string };

function model(messages: Message[], tools: Record<string, any>[]): Reply { // a stub: call your LLM here
  const last = messages[messages.length - 1];
  if (last.role === "user") {
    if (!tools[0].description.includes("order_total(id: str)")) throw new Error("tool not described");
    const code = "big = [o for o in list_orders() if order_total(o) > 100]\nprint(', '.join(big))";
    return { type: "tool_use", name: tools[0].name, input: { code } };
  }
  return { type: "text", text: "Orders over 100: " + last.content.trim() };
}

const tc = new Toolcell();
tc.tool("list_orders", { type: "object", description: "Ids of all orders." }, () => Object.keys(ORDERS).sort());
tc.tool("order_total", { type: "object", description: "One order's total, in EUR.",
  properties: { id: { type: "string", description: 'The order id, like "A-1".' } }, required: ["id"] },
  ({ id }: { id: string }) => ORDERS[id]);

const tools = [await tc.schema("anthropic")];
const messages: Message[] = [{ role: "user", content: "Which orders are over 100 EUR?" }];
let reply = model(messages, tools);
while (reply.type === "tool_use") {
  const result = await tc.execute(reply.input.code);
  messages.push({ role: "tool", content: result.status === "success" ? result.output : result.error ?? "" });
  reply = model(messages, tools);
}
console.log(reply.text);
await tc.close();
