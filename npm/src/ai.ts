// toolcell for the Vercel AI SDK (`ai` v7): one AI SDK tool, `execute_code`,
// whose cells run in a persistent Python kernel and call the app's own AI SDK
// tools as Python functions.
//
//   import { generateText, isStepCount } from "ai";
//   import { toolcellTool } from "toolcell/ai";
//
//   const execute_code = await toolcellTool({ tools: { get_order }, session: chatId });
//   const { text } = await generateText({ model, tools: { execute_code }, stopWhen: isStepCount(5), prompt });
//   await execute_code.close(); // when the conversation is over
//
// `ai` is an optional peer dependency of the `toolcell` package: only this
// entry point (`toolcell/ai`) needs it.

import { randomUUID } from "crypto";
import { asSchema, jsonSchema, tool } from "ai";
import type { ModelMessage, Tool, ToolExecutionOptions, ToolSet } from "ai";
import { Toolcell, ToolError } from "./index.js";
import type { Chunk, ExecuteResult, ToolCallContext, ToolFunction, ToolcellOptions } from "./index.js";

/** What the model sends: the cell's Python source, and whether to start a fresh kernel first. */
export interface ToolcellToolInput {
  code: string;
  reset?: boolean;
}

/**
 * What `execute_code` returns. While the cell runs (`streamText`, or any
 * consumer of preliminary tool results) the tool yields
 * `{status: "running", text: <output so far>}` (its newest `streamTail`
 * characters); the final result has the
 * cell's `status`, the `text` the model reads (see {@link resultText}) and
 * the whole structured `result` (kernel, files, usage, ...), kept by the SDK
 * in `toolResults` and the UI message parts. The model itself gets only
 * `text` (the tool's `toModelOutput`).
 */
export interface ToolcellToolOutput {
  status: ExecuteResult["status"] | "running";
  text: string;
  result?: ExecuteResult;
}

/**
 * The tool's own context (the `execute_code` entry of `toolsContext`): the
 * contexts of the app's tools, by tool name. A nested call of `get_order`
 * gets `toolsContext.execute_code.get_order` as its `context`.
 */
export type ToolcellToolContext = Record<string, unknown>;

export interface ToolcellToolOptions {
  /**
   * The client that runs the cells; share one between conversations (each
   * gets its own session). Without it a client is started with `config` and
   * `cwd`, and `close()` ends it.
   */
  toolcell?: Toolcell;
  /**
   * `config` of the client started when `toolcell` is not given. Unless it
   * has a `tools` section, that client offers only the app's tools
   * (`{tools: {enabled: []}}`: no built-in `read_file`, `terminal`, ...), as
   * the Python integrations do.
   */
  config?: ToolcellOptions["config"];
  /** The working directory of the client started when `toolcell` is not given. */
  cwd?: string;
  /**
   * The app's own AI SDK tools (`tool({...})` with an `execute`). Cells call
   * them as Python functions; their JSON Schema comes from `inputSchema`
   * (zod, `jsonSchema(...)` or any standard schema), and `execute` runs here,
   * in this process, with the outer tool call's `messages` and an
   * `abortSignal` that fires when the cell ends or the generation is
   * aborted. Registered once per client, for every session; a call runs the
   * tool of the adapter whose cell made it.
   */
  tools?: ToolSet;
  /**
   * The toolcell session: one kernel whose variables live on from one cell,
   * and one `generateText` call, to the next. Use one per conversation.
   */
  session?: string;
  /** A conversation id (e.g. `useChat`'s `id`); the session is `ai:<id>`. Ignored when `session` is given. */
  conversationId?: string;
  /** Seconds a cell may run (default: the server's configured timeout). */
  timeout?: number;
  /** Yield preliminary results with the output so far while a cell runs (default true). */
  stream?: boolean;
  /**
   * Characters of output a preliminary result carries: the newest ones, after a
   * `[... N characters before these ...]` line (default 20000). The final result has the whole
   * (capped) output.
   */
  streamTail?: number;
  /** The tool's description; default: the server's, which lists every function the cells can call. */
  description?: string;
}

/** The `execute_code` AI SDK tool, with the session it runs in. */
export type ToolcellTool = Tool<ToolcellToolInput, ToolcellToolOutput, ToolcellToolContext> & {
  execute: NonNullable<Tool<ToolcellToolInput, ToolcellToolOutput, ToolcellToolContext>["execute"]>;
  /** The toolcell session of this conversation. */
  readonly session: string;
  /** The client running the cells. */
  readonly toolcell: Toolcell;
  /**
   * End the conversation: its kernel and the app tools registered for it
   * (and the client, when the adapter started it). Call it when the
   * conversation is over, not after each request.
   */
  close(): Promise<void>;
};

/**
 * The cell's result as the text a model should read: the cleaned output
 * first, then (each on its own line, only when present) `status: …` (when
 * not success), `error: …`, `hint: …` and `warning: …`; a cell that printed
 * nothing and succeeded reads `(no output)`. The same text as the Python
 * integrations' `result_text`.
 */
export function resultText(result: ExecuteResult): string {
  const parts: string[] = [];
  const out = result.output ?? "";
  if (out) parts.push(out.endsWith("\n") ? out : out + "\n");
  if (result.status !== "success") parts.push(`status: ${result.status}\n`);
  if (result.error) parts.push(`error: ${result.error}\n`);
  if (result.hint) parts.push(`hint: ${result.hint}\n`);
  if (result.warning) parts.push(`warning: ${result.warning}\n`);
  if (!parts.length) return "(no output)";
  return parts.join("").replace(/\n+$/, "");
}

// A tool call names its session, not its cell: the cells the adapters run in one
// session (on one client) take turns, first come first served, so the cell the server
// runs in a session is always the one whose outer call is active there. (The server runs
// a session's cells one at a time anyway: taking turns costs no parallelism.) This holds
// when a step has several `execute_code` calls, and when two adapters share a session.
interface OuterCall {
  options: ToolExecutionOptions<ToolcellToolContext>;
  nested: number;
  /** The app tools of the adapter that started this cell. */
  impls: Map<string, Impl>;
}

interface Turns {
  /** Settles when the last one to ask has had its turn. */
  tail: Promise<void>;
  /** Those holding or waiting for a turn: the entry is dropped at 0. */
  users: number;
}
const turns = new WeakMap<Toolcell, Map<string, Turns>>();
/** session -> the outer call whose cell runs there now (it holds the session's turn). */
const actives = new WeakMap<Toolcell, Map<string, OuterCall>>();

function abortError(signal: AbortSignal): Error {
  const reason = signal.reason;
  if (reason instanceof Error) return reason;
  const e = new Error("the generation was aborted before this cell started; none of its code ran");
  e.name = "AbortError";
  return e;
}

/**
 * Waits for `session`'s turn; resolves to the function that ends it. Aborting `signal` while
 * waiting rejects (the turn is given up: nothing of the cell ran).
 */
async function takeTurn(tc: Toolcell, session: string, signal?: AbortSignal): Promise<() => void> {
  let bySession = turns.get(tc);
  if (!bySession) turns.set(tc, (bySession = new Map()));
  let t = bySession.get(session);
  if (!t) bySession.set(session, (t = { tail: Promise.resolve(), users: 0 }));
  const entry = t;
  const map = bySession;
  entry.users++;
  let done!: () => void;
  const mine = new Promise<void>((r) => (done = r));
  const before = entry.tail;
  entry.tail = before.then(() => mine); // the next one waits for this one and for those before it
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    done();
    if (--entry.users === 0 && map.get(session) === entry) map.delete(session);
  };
  if (signal) {
    if (signal.aborted) {
      end();
      throw abortError(signal);
    }
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<"aborted">((r) => {
      onAbort = () => r("aborted");
      signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      if ((await Promise.race([before.then(() => "turn" as const), aborted])) === "aborted") {
        end();
        throw abortError(signal);
      }
    } finally {
      signal.removeEventListener("abort", onAbort!);
    }
  } else {
    await before;
  }
  return end;
}

function activeOf(tc: Toolcell, session: string): OuterCall | undefined {
  return actives.get(tc)?.get(session);
}

function setActive(tc: Toolcell, session: string, call: OuterCall): void {
  let bySession = actives.get(tc);
  if (!bySession) actives.set(tc, (bySession = new Map()));
  bySession.set(session, call);
}

function clearActive(tc: Toolcell, session: string, call: OuterCall): void {
  const bySession = actives.get(tc);
  if (bySession?.get(session) === call) bySession.delete(session);
}

/** An app tool as a cell calls it: with the outer call whose cell made the call. */
type Impl = (args: unknown, ctx: ToolCallContext, outer: OuterCall | undefined) => Promise<unknown>;

interface AppTool {
  name: string;
  definition: { description?: string; input_schema: Record<string, unknown>; output_schema?: Record<string, unknown> };
  /** The definition as JSON: adapters whose tool of a name has the same one share its registration. */
  key: string;
  impl: Impl;
}

// The adapters' tools on one client: each name registered once, for every
// session, whatever the number of conversations (the server holds at most
// 1024 client tools per connection). A call goes to the adapter whose cell
// runs in the calling session (the active outer call, see `takeTurn`). A name
// another adapter (or the app) holds with a different definition is
// registered for the session only while the cell runs, unless the app has a
// tool of that name for that very session (never replaced).
interface Router {
  names: Map<string, { key: string; owners: number }>;
  /** Registrations and releases, one at a time. */
  busy: Promise<unknown>;
  /** `session\0name` registered for a session by an adapter (a shadow), until its cell ends. */
  shadows: Set<string>;
}
const routers = new WeakMap<Toolcell, Router>();

function routerOf(tc: Toolcell): Router {
  let r = routers.get(tc);
  if (!r) routers.set(tc, (r = { names: new Map(), busy: Promise.resolve(), shadows: new Set() }));
  return r;
}

function serialized<T>(r: Router, work: () => Promise<T>): Promise<T> {
  const run = r.busy.then(work, work);
  r.busy = run.catch(() => undefined);
  return run;
}

function dispatcher(tc: Toolcell, name: string): ToolFunction {
  return (args, ctx) => {
    const outer = activeOf(tc, ctx.session);
    if (!outer) {
      throw new ToolError(
        `${name}: no generation is using toolcell session ${JSON.stringify(ctx.session)} now; the app's tools can be called only from a cell that its execute_code tool runs`,
      );
    }
    const impl = outer.impls.get(name);
    if (!impl) throw new ToolError(`${name} is not one of the tools of the generation running this session`);
    return impl(args, ctx, outer);
  };
}

/** Registers `tools` on `tc` for every session (those not registered yet, in one request); the names held, and those shadowed. */
function acquire(tc: Toolcell, tools: AppTool[]): Promise<{ owned: string[]; shadowed: AppTool[] }> {
  const r = routerOf(tc);
  return serialized(r, async () => {
    const fresh: AppTool[] = [];
    const shared: string[] = [];
    const shadowed: AppTool[] = [];
    for (const t of tools) {
      const entry = r.names.get(t.name);
      if (entry) (entry.key === t.key ? shared.push(t.name) : shadowed.push(t));
      else if (tc.hasTool(t.name)) shadowed.push(t); // the app's own tool of that name stays
      else fresh.push(t);
    }
    if (fresh.length) {
      await tc.registerTools(fresh.map((t) => ({ name: t.name, schema: t.definition, fn: dispatcher(tc, t.name) })));
      for (const t of fresh) r.names.set(t.name, { key: t.key, owners: 0 });
    }
    const owned = [...fresh.map((t) => t.name), ...shared];
    for (const n of owned) r.names.get(n)!.owners++;
    return { owned, shadowed };
  });
}

/** Gives back `owned` names; a name no adapter holds any more is unregistered. */
function release(tc: Toolcell, owned: string[]): Promise<void> {
  const r = routerOf(tc);
  return serialized(r, async () => {
    const drop: string[] = [];
    for (const n of owned) {
      const entry = r.names.get(n);
      if (!entry) continue;
      if (--entry.owners <= 0) {
        r.names.delete(n);
        drop.push(n);
      }
    }
    if (drop.length) await tc.unregister(drop);
  });
}

/**
 * One signal for several (the app's and the call's); `dispose` removes the
 * listeners the fallback (no `AbortSignal.any`) added.
 */
function anySignal(signals: (AbortSignal | undefined)[]): { signal: AbortSignal | undefined; dispose: () => void } {
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  if (live.length <= 1) return { signal: live[0], dispose: () => undefined };
  const any = (AbortSignal as unknown as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any) return { signal: any(live), dispose: () => undefined };
  const c = new AbortController();
  const undo: (() => void)[] = [];
  for (const s of live) {
    if (s.aborted) {
      c.abort(s.reason);
      continue;
    }
    const on = () => c.abort(s.reason);
    s.addEventListener("abort", on, { once: true });
    undo.push(() => s.removeEventListener("abort", on));
  }
  return { signal: c.signal, dispose: () => undo.forEach((f) => f()) };
}

function isAsyncIterable(v: unknown): v is AsyncIterable<unknown> {
  return v != null && typeof (v as any)[Symbol.asyncIterator] === "function";
}

/** A schema's validation error on one line: `path: message; ...` (zod and standard-schema issues), else its message. */
function invalid(error: unknown): string {
  const e = error as { issues?: unknown; cause?: { issues?: unknown }; message?: string } | undefined;
  const issues = Array.isArray(e?.cause?.issues) ? e!.cause!.issues : Array.isArray(e?.issues) ? e!.issues : undefined;
  if (issues && (issues as unknown[]).length) {
    return (issues as { path?: PropertyKey[]; message?: string }[])
      .map((i) => (i.path?.length ? `${i.path.map(String).join(".")}: ` : "") + (i.message ?? "invalid"))
      .join("; ");
  }
  return String(e?.message ?? error).split("\n")[0];
}

function describe(t: Tool): string | undefined {
  if (typeof t.description === "string") return t.description;
  if (typeof t.description === "function") {
    try {
      return t.description({ context: undefined as never });
    } catch {
      return undefined; // a description that needs its context: the schema still tells the arguments
    }
  }
  return undefined;
}

/** An app tool, checked, with its definition for the server and the function a cell's call runs. */
async function appTool(name: string, t: Tool): Promise<AppTool> {
  if (t.type === "provider") {
    throw new TypeError(
      `toolcellTool: tools.${name} is a provider tool; cells can call only function tools (tool({...}) with an execute). ` +
        "Give it to generateText directly instead.",
    );
  }
  if (typeof t.execute !== "function") {
    throw new TypeError(
      `toolcellTool: tools.${name} has no execute function, so a cell cannot call it. ` +
        "Give it an execute, or pass it to generateText directly (its result then comes from your app).",
    );
  }
  if (t.needsApproval === true) {
    throw new TypeError(
      `toolcellTool: tools.${name} needs approval, which a cell cannot ask your app for (it runs inside the code tool's call). ` +
        "Give it to generateText directly, or make needsApproval a function that says when.",
    );
  }
  const approval = typeof t.needsApproval === "function" ? t.needsApproval : undefined;
  const input = asSchema(t.inputSchema);
  const definition: AppTool["definition"] = { input_schema: (await input.jsonSchema) as Record<string, unknown> };
  const description = describe(t);
  if (description) definition.description = description;
  if (t.outputSchema) {
    try {
      definition.output_schema = (await asSchema(t.outputSchema).jsonSchema) as Record<string, unknown>;
    } catch {
      /* an output schema without a JSON Schema form: the cell sees `-> Any` */
    }
  }
  const context = t.contextSchema ? asSchema(t.contextSchema) : undefined;
  const execute = t.execute;
  const impl: Impl = async (args, ctx, outer) => {
    let value: unknown = args;
    if (input.validate) {
      const checked = await input.validate(args);
      if (!checked.success) throw new ToolError(`invalid arguments: ${invalid(checked.error)}`);
      value = checked.value;
    }
    let toolContext = (outer?.options.context as ToolcellToolContext | undefined)?.[name];
    if (context?.validate) {
      const checked = await context.validate(toolContext);
      if (!checked.success) {
        throw new ToolError(
          `invalid context: ${invalid(checked.error)} (give it in generateText's toolsContext, under the code tool's name: toolsContext.execute_code.${name})`,
        );
      }
      toolContext = checked.value;
    }
    const n = outer ? ++outer.nested : 0;
    const signal = anySignal([ctx.signal, outer?.options.abortSignal]);
    const options: ToolExecutionOptions<any> = {
      toolCallId: outer ? `${outer.options.toolCallId}.${name}.${n}` : `toolcell.${name}`,
      messages: outer?.options.messages ?? ([] as ModelMessage[]),
      abortSignal: signal.signal,
      context: toolContext,
    };
    if (outer?.options.experimental_sandbox) options.experimental_sandbox = outer.options.experimental_sandbox;
    if (approval) {
      // The tool's own policy, asked per call as the SDK would: a call it
      // wants approved is refused (a cell cannot wait for a person).
      let ask: boolean;
      try {
        ask = await approval.call(t, value as never, { toolCallId: options.toolCallId, messages: options.messages, context: toolContext });
      } catch (e) {
        signal.dispose();
        throw new ToolError(`the approval check of ${name} failed: ${invalid(e)}`);
      }
      if (ask) {
        signal.dispose();
        throw new ToolError(`${name} needs approval for these arguments, and a cell cannot ask for it; ask the user, or call it with other arguments`);
      }
    }
    try {
      const out = execute.call(t, value as never, options);
      if (isAsyncIterable(out)) {
        let last: unknown;
        for await (const v of out) last = v; // preliminary results of a nested tool: the last one counts
        return last;
      }
      return await out;
    } finally {
      signal.dispose();
    }
  };
  return { name, definition, key: JSON.stringify(definition), impl };
}

/** The config of a client the adapter starts: the app's tools only, unless it says otherwise. */
function ownConfig(config: ToolcellToolOptions["config"]): ToolcellToolOptions["config"] {
  if (typeof config === "string") return config;
  if (config && "tools" in config) return config;
  return { ...(config ?? {}), tools: { enabled: [] } };
}

// A tool dropped without close(): its client ended when it started one, else its tools released.
// (FinalizationRegistry is ES2021; the package's lib setting is ES2020, Node has it since 14.6.)
interface Finalizers<T> {
  register(target: object, held: T, token?: object): void;
  unregister(token: object): boolean;
}
const Registry = (globalThis as { FinalizationRegistry?: new <T>(cleanup: (held: T) => void) => Finalizers<T> })
  .FinalizationRegistry;
const dropped: Finalizers<() => Promise<unknown>> | undefined = Registry
  ? new Registry<() => Promise<unknown>>((cleanup) => {
      cleanup().catch(() => undefined);
    })
  : undefined;

/**
 * What a dropped tool leaves to do. Made out here: a closure made inside `toolcellTool` would share
 * its scope, which holds the tool itself, and keep it alive.
 */
function cleanupOf(tc: Toolcell, own: boolean, owned: string[]): () => Promise<unknown> {
  return own ? () => tc.close() : () => release(tc, owned);
}

/** Characters of output a preliminary result carries by default (the newest; the final result has all). */
const STREAM_TAIL = 20000;

/**
 * The `execute_code` tool for `generateText`, `streamText` and agents: the
 * model writes Python, a persistent kernel runs it, and the code calls the
 * app's own AI SDK `tools` as Python functions (they run here, in Node).
 *
 * Resolves once the app's tools are registered, with the server's
 * description of the tool (it lists every callable function, with
 * signatures). The kernel's state lives as long as the session: reuse the
 * same `session` (or `conversationId`) across requests of one conversation,
 * and call `close()` when it is over. The app's tools are registered once
 * per client, whatever the number of conversations.
 *
 * A failing cell is a result, not an error: the model reads its traceback.
 * An app tool that throws raises `ToolError` in the cell (`"<tool>: Error:
 * <message>"`; a thrown `ToolError` from `toolcell`: `"<tool>: <message>"`). Aborting the
 * generation (`abortSignal`, or a tool timeout) cancels the cell.
 */
export async function toolcellTool(options: ToolcellToolOptions = {}): Promise<ToolcellTool> {
  const own = options.toolcell === undefined;
  const tc = options.toolcell ?? new Toolcell({ config: ownConfig(options.config), cwd: options.cwd });
  const session =
    options.session ?? (options.conversationId !== undefined ? `ai:${options.conversationId}` : `ai:${randomUUID()}`);
  const streaming = options.stream ?? true;
  const tail = Math.max(0, options.streamTail ?? STREAM_TAIL);
  let parameters: Record<string, unknown>;
  let description: string;
  let owned: string[] = [];
  let shadowed: AppTool[] = [];
  const impls = new Map<string, Impl>();
  try {
    const tools: AppTool[] = [];
    for (const [name, t] of Object.entries(options.tools ?? {})) tools.push(await appTool(name, t as Tool));
    for (const t of tools) impls.set(t.name, t.impl);
    ({ owned, shadowed } = await acquire(tc, tools));
    // with names registered for the session only while a cell runs, in the session's turn (for those names)
    const askSchema = () => tc.schema("openai", session);
    const schema = shadowed.length ? await inTurn(undefined, askSchema) : await askSchema();
    parameters = schema.function.parameters;
    description = options.description ?? schema.function.description;
  } catch (e) {
    if (own) await tc.close();
    else if (owned.length) await release(tc, owned).catch(() => undefined);
    throw e;
  }

  // `work` in the session's turn (its outer `call` active there meanwhile), with the app tools another
  // adapter holds under the same name with another definition registered for this session.
  async function inTurn<T>(call: OuterCall | undefined, work: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    const end = await takeTurn(tc, session, signal);
    try {
      if (signal?.aborted) throw abortError(signal); // aborted as its turn came: none of its code runs
      if (call) setActive(tc, session, call);
      try {
        const mine = await shadow();
        try {
          return await work();
        } finally {
          if (mine.length) {
            await tc.unregister(mine, { session }).catch(() => undefined);
            for (const n of mine) routerOf(tc).shadows.delete(`${session}\u0000${n}`);
          }
        }
      } finally {
        if (call) clearActive(tc, session, call);
      }
    } finally {
      end();
    }
  }

  // Registers the shadowed tools for the session (its turn is this adapter's); the names registered.
  async function shadow(): Promise<string[]> {
    if (!shadowed.length) return [];
    const r = routerOf(tc);
    const todo = shadowed.filter((t) => {
      const key = `${session}\u0000${t.name}`;
      if (tc.hasTool(t.name, { session }) && !r.shadows.has(key)) {
        // the app's own tool for this session: never replaced (a cell's calls of the name go to it)
        return false;
      }
      return true;
    });
    if (!todo.length) return [];
    await tc.registerTools(
      todo.map((t) => ({ name: t.name, schema: t.definition, fn: (args: unknown, ctx: ToolCallContext) => t.impl(args, ctx, activeOf(tc, session)) })),
      { session },
    );
    for (const t of todo) r.shadows.add(`${session}\u0000${t.name}`);
    return todo.map((t) => t.name);
  }

  const start = (input: ToolcellToolInput, opts: ToolExecutionOptions<ToolcellToolContext>, onChunk?: (c: Chunk) => void) => {
    if (typeof input?.code !== "string" || !input.code.trim()) {
      throw new ToolError("execute_code needs `code`: the Python source to run");
    }
    const call: OuterCall = { options: opts, nested: 0, impls };
    return inTurn(
      call,
      () =>
        tc.execute(input.code, {
          session,
          timeout: options.timeout,
          reset: input.reset === true,
          stream: onChunk,
          signal: opts.abortSignal,
        }),
      opts.abortSignal,
    );
  };
  const final = (result: ExecuteResult): ToolcellToolOutput => ({ status: result.status, text: resultText(result), result });

  async function* executeStreaming(
    input: ToolcellToolInput,
    opts: ToolExecutionOptions<ToolcellToolContext>,
  ): AsyncGenerator<ToolcellToolOutput, void, unknown> {
    // Only the newest `tail` characters are kept (a chatty cell must not grow the host, nor
    // make each preliminary result resend all of it); the final result has the whole output.
    let soFar = "";
    let omitted = 0;
    let fresh = false;
    let wake: (() => void) | undefined;
    let settled = false;
    const cell = start(input, opts, (c) => {
      soFar += c.text;
      if (soFar.length > tail) {
        let cut = soFar.length - tail;
        const code = soFar.charCodeAt(cut);
        if (code >= 0xdc00 && code <= 0xdfff) cut++; // never half a surrogate pair
        omitted += cut;
        soFar = soFar.slice(cut);
      }
      fresh = true;
      wake?.();
    });
    const done = cell.then(
      () => undefined,
      () => undefined,
    );
    void done.then(() => {
      settled = true;
      wake?.();
    });
    while (!settled) {
      if (!fresh) await new Promise<void>((r) => (wake = r));
      wake = undefined;
      if (fresh && !settled) {
        fresh = false;
        yield { status: "running", text: omitted ? `[... ${omitted} characters before these ...]\n${soFar}` : soFar };
      }
    }
    yield final(await cell);
  }

  async function executeOnce(input: ToolcellToolInput, opts: ToolExecutionOptions<ToolcellToolContext>): Promise<ToolcellToolOutput> {
    return final(await start(input, opts));
  }

  const base = tool<ToolcellToolInput, ToolcellToolOutput, ToolcellToolContext>({
    description,
    inputSchema: jsonSchema<ToolcellToolInput>(parameters as any),
    execute: streaming ? executeStreaming : executeOnce,
    toModelOutput: ({ output }) => ({ type: "text", value: output.text }),
  });

  dropped?.register(base, cleanupOf(tc, own, owned), base);

  let closed: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closed ??= (async () => {
      dropped?.unregister(base);
      if (own) {
        await tc.close();
        return;
      }
      await tc.shutdownSession(session);
      await release(tc, owned);
    })());

  // Not enumerable: the SDK copies and inspects tools; these are for the app.
  Object.defineProperties(base, {
    session: { value: session },
    toolcell: { value: tc },
    close: { value: close },
  });
  return base as ToolcellTool;
}
