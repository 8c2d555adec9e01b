// A client of `toolcell serve` (JSON-RPC 2.0, one message per line over the
// child's stdio): run Python cells in persistent kernels, and let the code
// call the host's own functions (client tools).

import { randomBytes } from "crypto";
import { spawn, ChildProcess } from "child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "fs";
import { tmpdir } from "os";
import { join } from "path";
import { createInterface } from "readline";
import { here } from "./here.js";

/** A piece of a running cell's output. */
export interface Chunk {
  session: string;
  stream: "stdout" | "stderr";
  text: string;
}

/** Which kernel ran the cell. */
export interface KernelInfo {
  id: string;
  mode: "project" | "strict" | string;
  python: string;
  reused: boolean;
  execution_count: number;
  state_reset: boolean;
  state_kept?: boolean;
  ended?: boolean;
  [key: string]: unknown;
}

/** A file the cell created, modified or deleted (path relative to the kernel's cwd). */
export interface FileChange {
  path: string;
  bytes?: number;
}

/** How a cell ended: the result object of `toolcell serve`'s `execute`. */
export interface ExecuteResult {
  status: "success" | "error" | "timeout" | "interrupted" | "refused";
  output: string;
  exit_code: number;
  tool_calls_made: number;
  duration_seconds: number;
  kernel: KernelInfo;
  error?: string;
  hint?: string;
  warning?: string;
  stdout_truncated: boolean;
  stdout_bytes_captured: number;
  stdout_bytes_total: number;
  stdout_bytes_omitted: number;
  stdout_spill_path?: string;
  stdin_requested?: boolean;
  usage?: { cpu_seconds: number; peak_rss_kb: number };
  display?: { mime: string; path: string }[];
  files?: {
    created: FileChange[];
    modified: FileChange[];
    deleted: FileChange[];
    truncated: boolean;
    counts?: { created: number; modified: number; deleted: number };
    scan_stopped?: boolean;
  };
  /** Fields a newer server adds. */
  [key: string]: unknown;
}

export interface ToolcellOptions {
  /** A toolcell.toml path, or sections written to a temporary one: `{execution: {timeout: 30}}`. */
  config?: string | Record<string, Record<string, unknown>>;
  /** The server's working directory (the kernels' default one). */
  cwd?: string;
  /** The binary; default `$TOOLCELL`, else the one in this package, else `toolcell` on PATH. */
  binary?: string;
  /** Extra arguments of `toolcell serve`, e.g. `["--timeout", "30"]`. */
  args?: string[];
  env?: NodeJS.ProcessEnv;
}

export interface ExecuteOptions {
  /** The session (conversation) whose kernel runs the cell; default "default". */
  session?: string;
  /** Seconds the cell may run (overrides the configured timeout). */
  timeout?: number;
  /** Called with each chunk of output while the cell runs. */
  stream?: (chunk: Chunk) => void;
  /** Run the cell in a fresh kernel. */
  reset?: boolean;
  mode?: "project" | "strict";
  tools?: string[];
  /** Absolute path: the kernel's working directory. */
  cwd?: string;
  /** Aborting it cancels the cell (`$/cancelRequest`). */
  signal?: AbortSignal;
}

/** What a tool function gets besides its arguments. */
export interface ToolCallContext {
  session: string;
  /** Milliseconds the server waits for the answer. */
  deadlineMs: number;
  /** Aborted when the server cancels the call (the cell ended); the answer is then dropped. */
  signal: AbortSignal;
}

export type ToolFunction = (args: any, ctx: ToolCallContext) => unknown | Promise<unknown>;

/** A JSON Schema object schema (the tool's arguments), or a whole definition. */
export type ToolSchema =
  | ({ type: "object"; properties?: Record<string, unknown>; required?: string[]; description?: string } & Record<string, unknown>)
  | { description?: string; input_schema: Record<string, unknown>; output_schema?: Record<string, unknown> };

export interface ToolOptions {
  /** Register for this session only (default: every session of this client). */
  session?: string;
}

/** Throw it from a tool to fail the call with exactly this message (the cell gets `ToolError`). */
export class ToolError extends Error {
  code: number;
  constructor(message: string, code = -32000) {
    super(message);
    this.name = "ToolError";
    this.code = code;
  }
}

/** The server refused a request (JSON-RPC error). */
export class RPCError extends Error {
  code: number;
  data: unknown;
  method: string;
  constructor(method: string, code: number, message: string, data?: unknown) {
    super(`${method}: ${message} (code ${code})`);
    this.name = "RPCError";
    this.method = method;
    this.code = code;
    this.data = data;
  }
}

/** The server ended (or was closed) before answering. */
export class ServerExited extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ServerExited";
  }
}

// JSON.stringify writes a lone surrogate as an escape (`\udXXX`; a pair it writes as is): an
// escape preceded by an even number of backslashes is one.
const LONE_SURROGATE_ESCAPE = /(?:^|[^\\])(?:\\\\)*\\ud[89a-f][0-9a-f]{2}/;

/** Whether JSON text made by JSON.stringify holds a lone surrogate (which serve cannot parse). */
function hasLoneSurrogate(json: string): boolean {
  return json.includes("\\ud") && LONE_SURROGATE_ESCAPE.test(json);
}

/** `s` with each lone surrogate replaced by U+FFFD. */
function wellFormed(s: string): string {
  return s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");
}

/** The `toolcell` binary to run: `$TOOLCELL`, else the one in this package, else PATH. */
export function findToolcellBin(): string {
  if (process.env.TOOLCELL) return process.env.TOOLCELL;
  const bundled = join(here, "..", "..", "bin", "toolcell");
  if (existsSync(bundled)) return bundled;
  return "toolcell";
}

function toolDefinition(name: string, schema: ToolSchema): Record<string, unknown> {
  if ("input_schema" in schema && schema.input_schema) return { name, ...schema };
  const { description, ...input } = schema as Record<string, unknown>;
  const definition: Record<string, unknown> = { name, input_schema: input };
  if (typeof description === "string") definition.description = description;
  return definition;
}

function tomlValue(v: unknown): string {
  if (typeof v === "boolean" || typeof v === "number") return String(v);
  if (typeof v === "string") return JSON.stringify(v);
  if (Array.isArray(v)) return "[" + v.map(tomlValue).join(", ") + "]";
  if (v && typeof v === "object")
    return "{" + Object.entries(v).map(([k, x]) => `${JSON.stringify(k)} = ${tomlValue(x)}`).join(", ") + "}";
  throw new TypeError(`toolcell config: cannot write ${String(v)} as TOML`);
}

interface Pending {
  method: string;
  session?: string;
  onChunk?: (c: Chunk) => void;
  resolve: (v: any) => void;
  reject: (e: Error) => void;
  /** Removes the request's abort listener (a long-lived signal must not collect one per request). */
  cleanup?: () => void;
}

/** One tool for {@link Toolcell.registerTools}. */
export interface ToolRegistration {
  name: string;
  /** The JSON Schema of the arguments, or `{description, input_schema, output_schema}` (as for `tool`). */
  schema: ToolSchema;
  fn: ToolFunction;
}

interface RegisteredTool {
  fn: ToolFunction;
  definition: Record<string, unknown>;
}

const live = new Set<Toolcell>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // At exit, end every server still open: SIGTERM makes it kill its kernels.
  process.on("exit", () => {
    for (const tc of live) tc.kill();
  });
}

/** A `toolcell serve` child and a client for it. Call `close()` when done. */
export class Toolcell {
  private child: ChildProcess;
  private pending = new Map<number, Pending>();
  private streams = new Map<string, number[]>();
  private tools = new Map<string, RegisteredTool>();
  private calls = new Map<string, AbortController>();
  private registrations: Promise<unknown>[] = [];
  private tempDir: string | undefined;
  private exited: Promise<number | null>;
  private exitCode: number | null | undefined;
  private closing = false;
  /** The last lines serve wrote to stderr (at most 20). */
  readonly stderrTail: string[] = [];
  /** Ids of tool calls the server cancelled (most recent last, at most 100). */
  readonly cancelledCalls: string[] = [];

  constructor(options: ToolcellOptions = {}) {
    const binary = options.binary ?? findToolcellBin();
    const args = ["serve"];
    if (typeof options.config === "string") {
      args.push("--config", options.config);
    } else if (options.config) {
      this.tempDir = mkdtempSync(join(tmpdir(), "toolcell-"));
      const lines: string[] = [];
      for (const [section, values] of Object.entries(options.config)) {
        lines.push(`[${section}]`);
        for (const [k, v] of Object.entries(values)) lines.push(`${JSON.stringify(k)} = ${tomlValue(v)}`);
        lines.push("");
      }
      const path = join(this.tempDir, "toolcell.toml");
      writeFileSync(path, lines.join("\n"));
      args.push("--config", path);
    }
    args.push(...(options.args ?? []));
    this.child = spawn(binary, args, {
      cwd: options.cwd,
      env: options.env,
      stdio: ["pipe", "pipe", "pipe"],
    });
    // serve's stderr (logs, a config error) goes on to ours; its last lines
    // are kept for the error given when it exits.
    const errLines = createInterface({ input: this.child.stderr!, crlfDelay: Infinity });
    errLines.on("line", (line) => {
      this.stderrTail.push(line);
      if (this.stderrTail.length > 20) this.stderrTail.shift();
      process.stderr.write(line + "\n");
    });
    this.exited = new Promise((resolve) => {
      this.child.on("exit", (code, signal) => {
        this.exitCode = code ?? (signal ? null : code);
        resolve(this.exitCode);
      });
      this.child.on("error", (err) => {
        this.exitCode = null;
        this.failAll(new ServerExited(`could not run ${binary} serve: ${err.message}`));
        resolve(null);
      });
    });
    this.child.stdin!.on("error", () => {
      /* EPIPE after the server ended: requests fail through failAll */
    });
    const lines = createInterface({ input: this.child.stdout!, crlfDelay: Infinity });
    lines.on("line", (line) => this.onLine(line));
    lines.on("close", () => {
      void this.exited.then((code) => {
        const how = this.closing ? "was closed" : `exited (status ${code})`;
        const tail = this.closing ? "" : this.stderrTail.slice(-5).map((l) => "\n  " + l).join("");
        this.failAll(new ServerExited(`toolcell serve ${how} before answering${tail}`));
      });
    });
    // Idle, the child does not keep Node running; a pending request does.
    this.setRef(false);
    live.add(this);
    installExitHook();
  }

  /** The process id of the `toolcell serve` child. */
  get pid(): number | undefined {
    return this.child.pid;
  }

  private setRef(on: boolean): void {
    type Handle = { ref?: () => void; unref?: () => void };
    const out = this.child.stdout as unknown as Handle;
    const inp = this.child.stdin as unknown as Handle;
    const err = this.child.stderr as unknown as Handle;
    if (on) {
      this.child.ref();
      out.ref?.();
    } else {
      this.child.unref();
      out.unref?.();
      inp.unref?.();
      err.unref?.();
    }
  }

  private failAll(err: Error): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    this.streams.clear();
    for (const c of this.calls.values()) c.abort();
    this.calls.clear();
    for (const p of all) {
      p.cleanup?.();
      p.reject(err);
    }
    this.setRef(false);
  }

  private send(msg: unknown): void {
    this.sendLine(JSON.stringify(msg));
  }

  private sendLine(line: string): void {
    if (this.exitCode !== undefined && !this.closing) {
      const tail = this.stderrTail.slice(-5).map((l) => "\n  " + l).join("");
      throw new ServerExited(`toolcell serve exited (status ${this.exitCode})${tail}`);
    }
    if (this.closing || this.exitCode !== undefined || !this.child.stdin || this.child.stdin.destroyed) {
      throw new ServerExited("toolcell serve is closed");
    }
    this.child.stdin.write(line + "\n");
  }

  private request(method: string, params: Record<string, unknown>, onChunk?: (c: Chunk) => void, signal?: AbortSignal): Promise<any> {
    const id = this.newId();
    const session = method === "execute" ? ((params.session as string) ?? "default") : undefined;
    return new Promise((resolve, reject) => {
      try {
        this.send({ jsonrpc: "2.0", id, method, params });
      } catch (e) {
        reject(e);
        return;
      }
      if (this.pending.size === 0) this.setRef(true);
      const pending: Pending = { method, session, onChunk, resolve, reject };
      this.pending.set(id, pending);
      if (onChunk && session !== undefined) {
        const q = this.streams.get(session) ?? [];
        q.push(id);
        this.streams.set(session, q);
      }
      if (signal) {
        const cancel = () => {
          if (this.pending.has(id)) this.notify("$/cancelRequest", { id });
        };
        if (signal.aborted) cancel();
        else {
          signal.addEventListener("abort", cancel, { once: true });
          pending.cleanup = () => signal.removeEventListener("abort", cancel);
        }
      }
    });
  }

  /** A request id nobody can guess (53 bits: exact as a JSON number), so whoever could write into
   * our stdin cannot answer a request of ours it has not seen. */
  private newId(): number {
    for (;;) {
      const [hi, lo] = randomBytes(8).reduce<[number, number]>(
        (acc, b, i) => (i < 4 ? [acc[0] * 256 + b, acc[1]] : [acc[0], acc[1] * 256 + b]),
        [0, 0],
      );
      const id = (hi % 0x200000) * 0x100000000 + lo;
      if (id !== 0 && !this.pending.has(id)) return id;
    }
  }

  private notify(method: string, params: Record<string, unknown>): void {
    try {
      this.send({ jsonrpc: "2.0", method, params });
    } catch {
      /* closed */
    }
  }

  private settle(id: unknown): Pending | undefined {
    if (typeof id !== "number") return undefined;
    const p = this.pending.get(id);
    if (!p) return undefined;
    this.pending.delete(id);
    p.cleanup?.();
    if (p.onChunk && p.session !== undefined) {
      const q = (this.streams.get(p.session) ?? []).filter((x) => x !== id);
      if (q.length) this.streams.set(p.session, q);
      else this.streams.delete(p.session);
    }
    if (this.pending.size === 0) this.setRef(false);
    return p;
  }

  private onLine(line: string): void {
    if (!line.trim()) return;
    let msg: any;
    try {
      msg = JSON.parse(line);
    } catch {
      return;
    }
    for (const m of Array.isArray(msg) ? msg : [msg]) this.dispatch(m);
  }

  private dispatch(msg: any): void {
    if (!msg || typeof msg !== "object") return;
    if (msg.method === undefined) {
      const p = this.settle(msg.id);
      if (!p) return;
      if (msg.error) p.reject(new RPCError(p.method, msg.error.code, String(msg.error.message), msg.error.data));
      else p.resolve(msg.result);
    } else if (msg.method === "cell/output") {
      const params = msg.params ?? {};
      const session = params.session ?? "default";
      const q = this.streams.get(session);
      const p = q && q.length ? this.pending.get(q[0]) : undefined;
      if (p?.onChunk) {
        try {
          p.onChunk({ session, stream: params.stream, text: params.chunk });
        } catch {
          /* a throwing callback must not stop the client */
        }
      }
    } else if (msg.method === "tool/call") {
      void this.toolCall(msg.id, msg.params ?? {});
    } else if (msg.method === "$/cancelRequest") {
      const id = msg.params?.id;
      this.cancelledCalls.push(id);
      if (this.cancelledCalls.length > 100) this.cancelledCalls.shift();
      const c = this.calls.get(id);
      if (c) {
        this.calls.delete(id);
        c.abort();
      }
    }
  }

  private async toolCall(id: string, params: any): Promise<void> {
    const name: string = params.name;
    const session: string = params.session ?? "default";
    const tool = this.tools.get(`${session}\u0000${name}`) ?? this.tools.get(`\u0000${name}`);
    // A tool call comes from a running cell; one for a session with no cell of ours running was
    // not sent by a cell of ours.
    const running = [...this.pending.values()].some((p) => p.method === "execute" && p.session === session);
    if (!running) {
      this.answerError(id, { code: -32600, message: `no cell of session ${JSON.stringify(session)} is running` });
      return;
    }
    if (!tool) {
      this.answerError(id, { code: -32601, message: `this client has no tool named ${JSON.stringify(name)}` });
      return;
    }
    const controller = new AbortController();
    this.calls.set(id, controller);
    if (this.calls.size === 1) this.setRef(true);
    let text: string | undefined;
    let error: { code: number; message: string } | undefined;
    try {
      const result = await tool.fn(params.arguments ?? {}, { session, deadlineMs: params.deadline_ms, signal: controller.signal });
      // Serialized once, here. A line the server cannot parse would never answer the call (the cell
      // would wait until its timeout): a string with a lone surrogate, which JSON.stringify writes as
      // an escape no UTF-8 text can hold, is answered with an error the cell sees at once.
      text = JSON.stringify(result === undefined ? null : result) ?? "null";
      if (hasLoneSurrogate(text)) {
        error = {
          code: -32000,
          message: `the tool returned text that is not valid Unicode: a lone surrogate, which UTF-8 cannot encode (use String.prototype.toWellFormed, or drop it)`,
        };
      }
    } catch (e: any) {
      if (e instanceof ToolError) error = { code: e.code, message: e.message };
      else if (e instanceof Error) error = { code: -32000, message: `${e.name}: ${e.message}` };
      else error = { code: -32000, message: String(e) };
    }
    const mine = this.calls.get(id) === controller;
    this.calls.delete(id);
    if (this.calls.size === 0 && this.pending.size === 0) this.setRef(false);
    if (!mine) return; // cancelled by the server: the answer is dropped
    if (error) {
      this.answerError(id, error);
      return;
    }
    try {
      this.sendLine(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":${text}}`);
    } catch {
      /* closed */
    }
  }

  private answerError(id: string, error: { code: number; message: string }): void {
    try {
      this.send({ jsonrpc: "2.0", id, error: { code: error.code, message: wellFormed(String(error.message)) } });
    } catch {
      /* closed */
    }
  }

  private async flush(): Promise<void> {
    while (this.registrations.length) await this.registrations.shift();
  }

  /**
   * Run a cell of Python and resolve to how it ended. A cell that fails is a
   * result (`status` "error", "timeout", …); a request the server refuses
   * rejects with `RPCError`.
   */
  async execute(code: string, options: ExecuteOptions = {}): Promise<ExecuteResult> {
    await this.flush();
    const params: Record<string, unknown> = { code, session: options.session ?? "default" };
    if (options.timeout !== undefined) params.timeout = options.timeout;
    if (options.reset) params.reset = true;
    if (options.stream) params.stream = true;
    if (options.mode) params.mode = options.mode;
    if (options.tools) params.tools = options.tools;
    if (options.cwd) params.cwd = options.cwd;
    return this.request("execute", params, options.stream, options.signal);
  }

  /**
   * Register `fn` as a client tool named `name`: cells call it as a Python
   * function with keyword arguments, and `fn` gets them as one object.
   * `schema` is the JSON Schema of the arguments (its `description` is the
   * tool's), or `{description, input_schema, output_schema}`. Registration
   * is sent at once; the next request waits for it.
   */
  tool(name: string, schema: ToolSchema, fn: ToolFunction, options: ToolOptions = {}): this {
    const definition = toolDefinition(name, schema);
    const key = `${options.session ?? ""}\u0000${name}`;
    this.tools.set(key, { fn, definition });
    const params: Record<string, unknown> = { tools: [definition] };
    if (options.session !== undefined) params.session = options.session;
    const done = this.request("tools/register", params).catch((e) => {
      this.tools.delete(key);
      throw e;
    });
    done.catch(() => undefined); // reported by the next request, not as unhandled
    this.registrations.push(done);
    return this;
  }

  /**
   * Register several client tools in one request and wait for the server:
   * all or none (a refused one rejects with `RPCError` and none is kept).
   * Resolves to the names registered.
   */
  async registerTools(tools: ToolRegistration[], options: ToolOptions = {}): Promise<string[]> {
    await this.flush();
    const scope = options.session ?? "";
    const definitions = tools.map((t) => toolDefinition(t.name, t.schema));
    const before = tools.map((t) => this.tools.get(`${scope}\u0000${t.name}`));
    tools.forEach((t, i) => this.tools.set(`${scope}\u0000${t.name}`, { fn: t.fn, definition: definitions[i] }));
    const params: Record<string, unknown> = { tools: definitions };
    if (options.session !== undefined) params.session = options.session;
    try {
      return (await this.request("tools/register", params)).registered;
    } catch (e) {
      tools.forEach((t, i) => {
        const key = `${scope}\u0000${t.name}`;
        if (before[i]) this.tools.set(key, before[i]!);
        else this.tools.delete(key);
      });
      throw e;
    }
  }

  /** Whether this client registered a tool `name` (for `session`, or for every session). */
  hasTool(name: string, options: ToolOptions = {}): boolean {
    return this.tools.has(`${options.session ?? ""}\u0000${name}`);
  }

  /** Remove client tools. */
  async unregister(names: string[], options: ToolOptions = {}): Promise<string[]> {
    await this.flush();
    const params: Record<string, unknown> = { names };
    if (options.session !== undefined) params.session = options.session;
    const r = await this.request("tools/unregister", params);
    for (const n of names) this.tools.delete(`${options.session ?? ""}\u0000${n}`);
    return r.unregistered;
  }

  /** The `execute_code` tool definition for a model, in the shape of `format`. */
  async schema(format: "openai" | "anthropic" | "mcp" = "openai", session?: string): Promise<Record<string, any>> {
    await this.flush();
    const params: Record<string, unknown> = { format };
    if (session !== undefined) params.session = session;
    return this.request("schema", params);
  }

  /** The live kernels. */
  async sessions(): Promise<Record<string, any>[]> {
    await this.flush();
    return (await this.request("sessions", {})).sessions;
  }

  /** Interrupt the cell running in `session` now; the number of kernels signalled. */
  async interrupt(session = "default"): Promise<number> {
    return (await this.request("interrupt", { session })).interrupted;
  }

  /** End `session` (after its queued cells); the number of kernels ended. */
  async shutdownSession(session = "default"): Promise<number> {
    return (await this.request("shutdown_session", { session })).shut_down;
  }

  /** End the server and its kernels (EOF on its stdin); its exit status. */
  async close(timeoutMs = 10000): Promise<number | null> {
    if (!this.closing) {
      this.closing = true;
      this.child.stdin?.end();
    }
    if (this.exitCode === undefined) {
      const timer = setTimeout(() => this.child.kill("SIGKILL"), timeoutMs);
      this.child.ref();
      await this.exited;
      clearTimeout(timer);
    }
    live.delete(this);
    if (this.tempDir) {
      rmSync(this.tempDir, { recursive: true, force: true });
      this.tempDir = undefined;
    }
    return this.exitCode ?? null;
  }

  /** Ends the server at once (SIGTERM: it kills its kernels first). Used at process exit. */
  kill(): void {
    if (this.exitCode === undefined) this.child.kill("SIGTERM");
    if (this.tempDir) rmSync(this.tempDir, { recursive: true, force: true });
  }
}

export default Toolcell;
