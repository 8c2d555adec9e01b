// The CommonJS entry point of the installed package.
const { test } = require("node:test");
const assert = require("node:assert/strict");
const { Toolcell, ToolError } = require("toolcell");

test("require() gets the same client", async () => {
  const tc = new Toolcell();
  try {
    tc.tool("double", { type: "object", properties: { n: { type: "number" } }, required: ["n"] }, ({ n }) => 2 * n);
    const r = await tc.execute("print(double(21))");
    assert.equal(r.output, "42\n");
    assert.equal(typeof ToolError, "function");
  } finally {
    await tc.close();
  }
});
