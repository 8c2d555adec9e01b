// toolcell kernel runner for JavaScript (node 18+, no packages).
//
// The in-band protocol (see README.md beside this file). The bootstrap
// (BOOTSTRAP_JS in language.rs) reads the runner and the stub module from
// stdin (length-prefixed) and runs this file with `module.toolcell` =
// {stubs, kdir} (kdir: the kernel directory; empty on a remote). Then a
// worker thread alone reads the host's requests, `hello` included (a private
// descriptor of the stdin pipe; fd 0 becomes /dev/null for the cells): it
// turns an `interrupt` into SIGINT for us, hands every
// other line to the main thread, and on EOF (the host is gone) kills our
// process group at once, even during a busy cell. Frames
// "\n" SENTINEL " " <length> "\n" <JSON> go to private descriptors of the
// stdout and stderr pipes; tool calls are `tool_call` frames answered by
// `tool_reply` lines. Cells run in the one global context
// (vm.runInThisContext), so globals, and let/const/class/function
// declarations (rewritten to var), persist from cell to cell.
'use strict';

const fs = require('fs');
const path = require('path');
const vm = require('vm');
const util = require('util');
const { Worker } = require('worker_threads');

const PROTOCOL = 1;
const BOOT = module.toolcell || { stubs: '', kdir: '' };
const REMOTE = !BOOT.kdir;
const KDIR = BOOT.kdir || '';

// ---- What a cell read (docs/result.md, "files": read) ----
// fs's reading functions, wrapped: while a cell runs, each regular file they
// are asked to read is noted once, in first-read order, 50 listed and the
// rest counted. Files under node's own prefix, any node_modules and the
// runner's and kernel's directories are the interpreter's, not the cell's,
// as are the module sources require() reads.
const READ_LISTED = 50;
const READ_KNOWN = 4096;
let reads = null; // { listed: Map, known: Set, more } while a cell runs
const statSync = fs.statSync;
const readSkip = [path.resolve(path.dirname(process.execPath), '..') + path.sep]
  .concat(KDIR ? [path.resolve(KDIR) + path.sep] : [])
  .concat(typeof __dirname === 'string' && __dirname ? [path.resolve(__dirname) + path.sep] : []);

function noteRead(p) {
  const r = reads;
  if (r === null) return;
  try {
    if (typeof p !== 'string') {
      if (p instanceof URL) p = require('url').fileURLToPath(p);
      else if (Buffer.isBuffer(p)) p = p.toString();
      else return; // a descriptor: opened before
    }
    if (r.known.has(p)) return;
    const full = path.resolve(p);
    if (r.known.size < READ_KNOWN) {
      const seen = r.known.has(full);
      r.known.add(p);
      if (seen) return;
      r.known.add(full);
    } else if (r.listed.has(full)) return;
    if (full.includes(`${path.sep}node_modules${path.sep}`) || readSkip.some((d) => full.startsWith(d))) return;
    // require() reads a module's source through fs too: not the cell's read.
    if (new Error().stack.includes('node:internal/modules/')) return;
    if (!statSync(full).isFile()) return;
    if (r.listed.size < READ_LISTED) r.listed.set(full, true);
    else r.more += 1;
  } catch (_) {
    // Never break the cell's own call.
  }
}

function readsFlags(flags) {
  if (flags === undefined || flags === null) return true;
  if (typeof flags === 'string') return flags.includes('r') || flags.includes('+');
  return typeof flags === 'number' && (flags & 3) !== fs.constants.O_WRONLY;
}

function wrapReads(obj, name, flagsAt) {
  const orig = obj && obj[name];
  if (typeof orig !== 'function') return;
  obj[name] = function (p, ...rest) {
    if (reads !== null && (flagsAt === undefined || readsFlags(rest[flagsAt - 1]))) noteRead(p);
    return orig.call(this, p, ...rest);
  };
}

for (const name of ['readFileSync', 'readFile', 'createReadStream']) wrapReads(fs, name);
for (const name of ['openSync', 'open']) wrapReads(fs, name, 1);
wrapReads(fs.promises, 'readFile');
wrapReads(fs.promises, 'open', 1);

let MARK = null;
// Private descriptors of the stdout and stderr pipes (a cell that closes or
// redirects fd 1 or 2 cannot cut the frame channel); fds 1 and 2 themselves
// where they cannot be reopened (a socket).
function privateFd(fd) {
  try { return fs.openSync(`/proc/self/fd/${fd}`, 'w'); } catch (_) { return fd; }
}
const OUT_FD = privateFd(1);
const ERR_FD = privateFd(2);

function writeAll(fd, buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
}

function sendBody(fd, text) {
  const body = Buffer.from(text, 'utf8');
  const header = Buffer.from(MARK + body.length + '\n', 'utf8');
  if (header.length + body.length <= 4096) {
    writeAll(fd, Buffer.concat([header, body]));
  } else {
    writeAll(fd, header); // one atomic write: a reader never sees half a marker
    writeAll(fd, body);
  }
}

function send(fd, obj) {
  sendBody(fd, JSON.stringify(obj));
}

function rawStderr(message) {
  try { writeAll(ERR_FD, Buffer.from(`toolcell runner: ${message}\n`)); } catch (_) { /* gone */ }
}

// Our process group when we lead one (locally always; on a remote when the
// command made us a leader), else only ourselves.
const KILL_TARGET = (() => {
  try {
    const st = fs.readFileSync('/proc/self/stat', 'utf8');
    const pgrp = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[2]);
    return pgrp === process.pid ? -process.pid : process.pid;
  } catch (_) { return process.pid; }
})();

// --------------------------------------------------------------------------
// Requests
// --------------------------------------------------------------------------

// The request reader thread. It owns the request pipe: lines go to the main
// thread, `interrupt` becomes SIGINT here (the main thread may be busy), EOF
// kills the group.
const READER = `
const net = require('net');
const { workerData, parentPort } = require('worker_threads');
const die = () => {
  try { process.kill(workerData.target, 'SIGKILL'); } catch (_) {}
  process.kill(workerData.pid, 'SIGKILL');
};
const INTERRUPT = '{"type":"interrupt"}';
let pending = [];
let size = 0;
const take = (line) => {
  if (line === INTERRUPT) { try { process.kill(workerData.pid, 'SIGINT'); } catch (_) {} return; }
  parentPort.postMessage(line);
};
const feed = (chunk) => {
  for (;;) {
    const nl = chunk.indexOf(10);
    if (nl < 0) {
      pending.push(chunk);
      size += chunk.length;
      if (size > 512 * 1024 * 1024) { pending = []; size = 0; }
      return;
    }
    pending.push(chunk.subarray(0, nl));
    const line = Buffer.concat(pending).toString('utf8');
    pending = []; size = 0;
    chunk = chunk.subarray(nl + 1);
    take(line);
  }
};
const requests = new net.Socket({ fd: workerData.fd, readable: true, writable: false });
requests.on('data', feed);
requests.on('end', die);
requests.on('error', die);
`;

const queue = [];
let waiter = null;
function nextRequest() {
  if (queue.length) return Promise.resolve(queue.shift());
  return new Promise((resolve) => { waiter = resolve; });
}
const calls = new Map();
let callSeq = 0;
function onLine(line) {
  if (!line.trim()) return;
  let req;
  try { req = JSON.parse(line); } catch (e) { rawStderr(`request line is not JSON (${e.message})`); return; }
  if (!req || typeof req !== 'object') { rawStderr('request is not a JSON object'); return; }
  if (req.type === 'tool_reply') {
    const resolve = calls.get(req.id);
    if (resolve) { calls.delete(req.id); resolve(req.reply); }
    return;
  }
  if (waiter) { const w = waiter; waiter = null; w(req); } else queue.push(req);
}

// A tool call in-band: a `tool_call` frame, answered by a `tool_reply` line
// with its id; resolves to the reply object (`{ok, result}` or `{ok:false,
// code, error}`). Calls run in parallel.
function inbandCall(tool, args) {
  const id = ++callSeq;
  let body;
  try { body = JSON.stringify({ type: 'tool_call', id, tool, args }); } catch (e) { return Promise.reject(e); }
  return new Promise((resolve) => {
    calls.set(id, resolve);
    try { sendBody(OUT_FD, body); } catch (e) {
      calls.delete(id);
      resolve({ ok: false, code: 'connection_lost', error: `lost the connection to the toolcell host (${e.message}); the outcome is unknown and the call was not repeated` });
    }
  });
}

// The reader starts first thing: its thread boots while the main thread
// loads the stub module.
let reader = null;
{
  // A private descriptor of the request pipe; fd 0 becomes /dev/null, so
  // nothing a cell starts can read the host's requests.
  let reqFd = 0;
  try {
    reqFd = fs.openSync('/proc/self/fd/0', 'r');
    fs.closeSync(0);
    const nul = fs.openSync('/dev/null', 'r');
    if (nul !== 0) fs.closeSync(nul);
  } catch (_) { /* a socket: read fd 0 itself */ }
  reader = new Worker(READER, {
    eval: true, stdout: false, stderr: false,
    workerData: { fd: reqFd, pid: process.pid, target: KILL_TARGET },
  });
  reader.on('message', onLine);
  reader.on('error', (e) => { rawStderr(`request reader failed: ${e.message}`); process.kill(process.pid, 'SIGKILL'); });
  reader.unref();
}

// --------------------------------------------------------------------------
// The cells' world
// --------------------------------------------------------------------------

const STDIN_MESSAGE = 'interactive input is not supported: a toolcell cell cannot read stdin ' +
  '(process.stdin, readline). Pass the data in the code itself, or write it to a file and read the file.';
let stdinRequested = false;
function refuseStdin() {
  stdinRequested = true;
  const e = new Error(STDIN_MESSAGE);
  e.code = 'ERR_TOOLCELL_NO_STDIN';
  throw e;
}
Object.defineProperty(process, 'stdin', { configurable: true, enumerable: true, get: refuseStdin });
{
  const realReadFileSync = fs.readFileSync;
  fs.readFileSync = function readFileSync(file, ...rest) {
    if (file === 0 || file === '/dev/stdin' || file === '/proc/self/fd/0') refuseStdin();
    return realReadFileSync.call(this, file, ...rest);
  };
  const realReadSync = fs.readSync;
  fs.readSync = function readSync(fd, ...rest) {
    if (fd === 0) refuseStdin();
    return realReadSync.call(this, fd, ...rest);
  };
}

// `require` for cells resolves from the working directory.
const { createRequire } = require('module');
globalThis.require = createRequire(path.join(process.cwd(), '[toolcell-cell]'));
globalThis.module = { exports: {}, id: '[toolcell-cell]' };
globalThis.exports = globalThis.module.exports;
globalThis.__filename = path.join(process.cwd(), '[toolcell-cell]');
globalThis.__dirname = process.cwd();

// Tools: the generated module's exports become globals; the names of the
// last set are removed when a new set is loaded. A global the kernel has
// (Array, Error, JSON, console, Promise, require, …) is never replaced: the
// host maps such names already (`Map` -> `Map_`); this is the last guard,
// for globals of a newer node, so that no tool name can break this runner.
const KERNEL_GLOBALS = new Set([...Object.getOwnPropertyNames(globalThis), 'toolcell_tools', '_']);
let toolNames = [];
function loadStubs(source, filename) {
  const m = { exports: {}, toolcell_transport: inbandCall };
  const fn = vm.runInThisContext(require('module').wrap(source), { filename });
  fn(m.exports, require, m, filename, KDIR);
  for (const n of toolNames) { if (!Object.prototype.hasOwnProperty.call(m.exports, n)) delete globalThis[n]; }
  toolNames = Object.keys(m.exports).filter((n) => !KERNEL_GLOBALS.has(n));
  for (const n of toolNames) globalThis[n] = m.exports[n];
  globalThis.toolcell_tools = m.exports;
}
try {
  loadStubs(BOOT.stubs, 'toolcell_tools.js');
} catch (e) {
  rawStderr(`cannot load the tool functions: ${e.message}`);
}

// Errors thrown outside the cell's own flow (timers, rejected promises no one
// awaited) while a cell runs belong to it; between cells they are printed.
let current = null;
function describe(err) {
  if (err instanceof Error || (err && typeof err.stack === 'string')) return cleanStack(err);
  return `Uncaught ${util.inspect(err)}`;
}
// During a cell the text names the cell line the error came from.
function uncaught(prefix, err) {
  if (current && current.filename && (err instanceof Error || (err && typeof err.stack === 'string'))) {
    current.errors.push(`${prefix}${errorText(err, current.filename, current.src)}`);
    return;
  }
  const text = `${prefix}${describe(err)}\n`;
  if (current) { current.errors.push(text); } else { try { process.stderr.write(text); } catch (_) {} }
}
process.on('uncaughtException', (err) => uncaught('Uncaught ', err));
process.on('unhandledRejection', (err) => uncaught('Uncaught (in promise) ', err));
// SIGINT: interrupts a running cell (a busy loop through breakOnSigint, an
// awaiting cell through this handler); ignored between cells.
process.on('SIGINT', () => { if (current && current.interrupt) current.interrupt(); });

// --------------------------------------------------------------------------
// Source rewriting: top-level declarations become globals that a later cell
// may declare again, and top-level await runs in an async wrapper whose
// last expression is the completion value.
// --------------------------------------------------------------------------

const KEYWORD_BEFORE_REGEX = new Set(['return', 'typeof', 'instanceof', 'in', 'of', 'new', 'delete',
  'void', 'throw', 'case', 'do', 'else', 'yield', 'await']);

// Top-level tokens: [{t: 'id'|'punct'|'other', v, start, end, depth, nl}]
function scan(src) {
  const toks = [];
  let depth = 0;
  let i = 0;
  let nl = true;
  const stack = [];
  let last = null;
  const push = (t, v, start, end) => {
    const tok = { t, v, start, end, depth, nl };
    toks.push(tok);
    last = tok;
    nl = false;
  };
  const n = src.length;
  while (i < n) {
    const c = src[i];
    if (c === '\n') { nl = true; i++; continue; }
    if (c === ' ' || c === '\t' || c === '\r') { i++; continue; }
    if (c === '/' && src[i + 1] === '/') { while (i < n && src[i] !== '\n') i++; continue; }
    if (c === '/' && src[i + 1] === '*') { const e = src.indexOf('*/', i + 2); i = e < 0 ? n : e + 2; continue; }
    if (c === '"' || c === "'") {
      const s = i; i++;
      while (i < n && src[i] !== c && src[i] !== '\n') { if (src[i] === '\\') i++; i++; }
      i++; push('str', '', s, i); continue;
    }
    if (c === '`') {
      const s = i; i++;
      let inner = 0;
      while (i < n) {
        if (src[i] === '\\') { i += 2; continue; }
        if (src[i] === '`' && inner === 0) { i++; break; }
        if (src[i] === '$' && src[i + 1] === '{') { inner++; i += 2; continue; }
        if (src[i] === '}' && inner > 0) { inner--; i++; continue; }
        i++;
      }
      push('str', '', s, i); continue;
    }
    if (/[A-Za-z_$\u0080-\uffff]/.test(c)) {
      const s = i;
      while (i < n && /[A-Za-z0-9_$\u0080-\uffff]/.test(src[i])) i++;
      push('id', src.slice(s, i), s, i); continue;
    }
    if (/[0-9]/.test(c)) {
      const s = i;
      while (i < n && /[0-9A-Za-z_.]/.test(src[i])) i++;
      push('num', '', s, i); continue;
    }
    if (c === '/') {
      const regexOk = !last || (last.t === 'punct' && !')]}'.includes(last.v)) ||
        (last.t === 'id' && KEYWORD_BEFORE_REGEX.has(last.v));
      if (regexOk) {
        const s = i; i++;
        let cls = false;
        while (i < n && src[i] !== '\n') {
          if (src[i] === '\\') { i += 2; continue; }
          if (src[i] === '[') cls = true; else if (src[i] === ']') cls = false;
          else if (src[i] === '/' && !cls) { i++; break; }
          i++;
        }
        while (i < n && /[a-z]/.test(src[i])) i++;
        push('regex', '', s, i); continue;
      }
    }
    if ('([{'.includes(c)) { push('punct', c, i, i + 1); stack.push(c); depth++; i++; continue; }
    if (')]}'.includes(c)) { depth = Math.max(0, depth - 1); stack.pop(); push('punct', c, i, i + 1); i++; continue; }
    push('punct', c, i, i + 1); i++;
  }
  return toks;
}

// Starts of top-level statements: indexes into toks.
function statementStarts(toks) {
  const starts = [];
  let prev = null;
  const CONT = new Set(['.', ',', '=', '+', '-', '*', '/', '%', '&', '|', '^', '?', ':', '<', '>', '!', '(', '[', '{']);
  for (let k = 0; k < toks.length; k++) {
    const t = toks[k];
    if (t.depth !== 0 && !(t.t === 'punct' && '}])'.includes(t.v) && t.depth === 0)) { prev = t; continue; }
    let start = false;
    if (!prev) start = true;
    else if (prev.depth === 0 && prev.t === 'punct' && prev.v === ';') start = true;
    else if (t.nl && prev.depth === 0) {
      const prevEnds = !(prev.t === 'punct' && CONT.has(prev.v)) &&
        !(prev.t === 'id' && KEYWORD_BEFORE_REGEX.has(prev.v));
      const nextCont = t.t === 'punct' && '.,=+-*/%&|^?:<>)]}'.includes(t.v) ||
        (t.t === 'id' && (t.v === 'in' || t.v === 'of' || t.v === 'instanceof'));
      if (prevEnds && !nextCont) start = true;
      if (prev.t === 'punct' && prev.v === '}' && !nextCont) start = true;
    } else if (prev.depth === 0 && prev.t === 'punct' && prev.v === '}' && t.depth === 0 &&
      t.t === 'id' && /^(let|const|var|class|function|async|if|for|while|return)$/.test(t.v)) start = true;
    if (start && t.depth === 0) starts.push(k);
    prev = t;
  }
  return starts;
}

const NO_VALUE = /^(var|let|const|function|async\s+function|class|if|for|while|do|switch|try|return|throw|break|continue|import|export|debugger|with)\b/;

function transform(src) {
  const toks = scan(src);
  const starts = statementStarts(toks);
  const edits = []; // [start, end, text]
  let hasAwait = false;
  for (const t of toks) if (t.t === 'id' && t.v === 'await' && t.depth >= 0) { hasAwait = true; break; }
  for (const k of starts) {
    const t = toks[k];
    if (t.t !== 'id') continue;
    if (t.v === 'let' || t.v === 'const') {
      const nx = toks[k + 1];
      if (nx && (nx.t === 'id' || (nx.t === 'punct' && (nx.v === '{' || nx.v === '[')))) edits.push([t.start, t.end, 'var']);
    } else if (t.v === 'class') {
      const nx = toks[k + 1];
      if (nx && nx.t === 'id' && nx.v !== 'extends') edits.push([t.start, t.start, `var ${nx.v} = `]);
    }
  }
  let out = src;
  for (const [s, e, text] of edits.sort((a, b) => b[0] - a[0])) out = out.slice(0, s) + text + out.slice(e);
  return { code: out, hasAwait, toks, starts };
}

// The async form: declarations become assignments to globals (sloppy mode),
// and the last statement, when an expression, is returned.
function asyncForm(src) {
  const toks = scan(src);
  const starts = statementStarts(toks);
  const edits = [];
  for (let si = 0; si < starts.length; si++) {
    const k = starts[si];
    const t = toks[k];
    const endTok = si + 1 < starts.length ? toks[starts[si + 1] - 1] : toks[toks.length - 1];
    let stmtEnd = endTok.end;
    if (endTok.t === 'punct' && endTok.v === ';') stmtEnd = endTok.start;
    if (t.t === 'id' && (t.v === 'let' || t.v === 'const' || t.v === 'var')) {
      const nx = toks[k + 1];
      if (nx && nx.t === 'punct' && (nx.v === '{' || nx.v === '[')) {
        edits.push([t.start, nx.start, '(']);
        edits.push([stmtEnd, stmtEnd, ')']);
      } else {
        // `let a = 1, b` -> `void (a = 1, b = void 0)` is not needed: a bare
        // name is kept defined by assigning it when it has no initializer.
        edits.push([t.start, t.end, 'void (']);
        edits.push([stmtEnd, stmtEnd, ')']);
        // names without initializer: `x` -> `x = undefined`
        let d = 0;
        for (let j = k + 1; j < toks.length && toks[j].start < stmtEnd; j++) {
          const tj = toks[j];
          if (tj.t === 'punct' && '([{'.includes(tj.v)) d++;
          if (tj.t === 'punct' && ')]}'.includes(tj.v)) d--;
          if (d !== 0) continue;
          const prevT = toks[j - 1];
          const nextT = toks[j + 1];
          const declStart = prevT === t || (prevT.t === 'punct' && prevT.v === ',');
          const noInit = !nextT || nextT.start >= stmtEnd || (nextT.t === 'punct' && nextT.v === ',');
          if (tj.t === 'id' && declStart && noInit) edits.push([tj.end, tj.end, ' = undefined']);
        }
      }
    } else if (t.t === 'id' && t.v === 'class') {
      const nx = toks[k + 1];
      if (nx && nx.t === 'id') edits.push([t.start, t.start, `${nx.v} = `]);
    } else if (t.t === 'id' && (t.v === 'function' || (t.v === 'async' && toks[k + 1] && toks[k + 1].v === 'function'))) {
      let j = k + 1;
      if (toks[j] && toks[j].v === 'function') j++;
      if (toks[j] && toks[j].v === '*') j++;
      if (toks[j] && toks[j].t === 'id') edits.push([t.start, t.start, `${toks[j].v} = `]);
    }
  }
  // The completion value: the last statement, when it is an expression.
  let ret = null;
  if (starts.length) {
    const k = starts[starts.length - 1];
    const text = src.slice(toks[k].start);
    if (!NO_VALUE.test(text) && !(toks[k].t === 'punct' && toks[k].v === '{')) {
      const lastTok = toks[toks.length - 1];
      const end = lastTok.t === 'punct' && lastTok.v === ';' ? lastTok.start : lastTok.end;
      ret = [toks[k].start, end];
    }
  }
  const apply = (withReturn) => {
    const all = edits.slice();
    if (withReturn && ret) {
      all.push([ret[0], ret[0], 'return (']);
      all.push([ret[1], ret[1], ')']);
    }
    let out = src;
    for (const [s, e, text] of all.sort((a, b) => b[0] - a[0] || b[1] - a[1])) out = out.slice(0, s) + text + out.slice(e);
    return '(async () => {' + out + '\n})()';
  };
  return [apply(true), apply(false)];
}

function compile(src, filename) {
  const { code, hasAwait } = transform(src);
  try {
    return { script: new vm.Script(code, { filename }), isAsync: false };
  } catch (e) {
    if (!(e instanceof SyntaxError) || !hasAwait) throw e;
    const forms = asyncForm(src);
    for (const form of forms) {
      try { return { script: new vm.Script(form, { filename }), isAsync: true }; } catch (_) { /* next */ }
    }
    throw e;
  }
}

// --------------------------------------------------------------------------
// Running a cell
// --------------------------------------------------------------------------

function cleanStack(err) {
  let stack = typeof err.stack === 'string' ? err.stack : String(err);
  const lines = stack.split('\n');
  const kept = lines.filter((l) => !(/^\s+at /.test(l) && (l.includes(__filename) ||
    l.includes('node:internal') || l.includes('node:vm') || /\(vm\.js|\[eval\]/.test(l) ||
    /at (Script\.runInThisContext|runCell|handleExecute|main)\b/.test(l))));
  return kept.join('\n');
}

function errorText(err, filename, src) {
  let text = err instanceof Error || (err && typeof err.stack === 'string') ? cleanStack(err) : `Uncaught ${util.inspect(err)}`;
  const stack = (err && typeof err.stack === 'string') ? err.stack : '';
  const re = new RegExp(filename.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + ':(\\d+)');
  const m = re.exec(stack);
  if (m) {
    const n = Number(m[1]);
    const line = src.split('\n')[n - 1];
    if (line !== undefined && !text.includes(`${filename}:${n}`)) text += `\n    at ${filename}:${n}`;
    if (line !== undefined) text += `\n  line ${n}: ${line.trim()}`;
  } else if (err instanceof SyntaxError && stack) {
    // vm puts the offending line on top of a SyntaxError's stack.
    text = stack.split('\n').filter((l) => !/^\s+at /.test(l)).join('\n');
  }
  return text + '\n';
}

let execCount = 0;

// CPU seconds of the process and of its waited-for children (/proc/self/stat
// cutime + cstime, in clock ticks of 1/100 s), and the peak RSS in KiB.
function selfUsage() {
  const u = process.resourceUsage();
  return { cpu: (u.userCPUTime + u.systemCPUTime) / 1e6, maxRSS: u.maxRSS };
}
function childrenCpu() {
  try {
    const f = fs.readFileSync('/proc/self/stat', 'latin1');
    const parts = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(parts[13]) + Number(parts[14])) / 100;
  } catch (_) { return 0; }
}
// Children's CPU at the end of the last cell: the start of the next one
// (children are waited for during cells; one /proc read per cell).
let lastChildrenCpu = null;

async function runCell(src, filename, state) {
  const compiled = compile(src, filename);
  let value = compiled.script.runInThisContext({ breakOnSigint: true, displayErrors: false });
  if (compiled.isAsync) {
    value = await Promise.race([value, new Promise((_, reject) => {
      state.interrupt = () => { const e = new Error('Script execution interrupted.'); e.code = 'ERR_SCRIPT_EXECUTION_INTERRUPTED'; reject(e); };
    })]);
  }
  return value;
}

async function handleExecute(req) {
  const rid = req.id;
  if (typeof rid !== 'string') { rawStderr('execute request without a string id ignored'); return; }
  execCount += 1;
  const count = execCount;
  const filename = `cell-${count}`;
  const t0 = process.hrtime.bigint();
  if (lastChildrenCpu === null) lastChildrenCpu = childrenCpu();
  const cpu0 = selfUsage().cpu + lastChildrenCpu;
  stdinRequested = false;
  let status = 'ok';
  let traceback = '';
  const state = { errors: [], interrupt: null, filename, src: typeof req.code === 'string' ? req.code : '' };
  current = state;
  reads = { listed: new Map(), known: new Set(), more: 0 };
  try {
    if (typeof req.stubs === 'string') loadStubs(req.stubs, 'toolcell_tools.js');
    if (typeof req.code !== 'string') throw new TypeError('execute request: code must be a string');
    const value = await runCell(req.code, filename, state);
    if (value !== undefined) {
      globalThis._ = value;
      process.stdout.write(util.inspect(value, { colors: false }) + '\n');
    }
  } catch (err) {
    if (err && err.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
      status = 'interrupted';
      traceback = `Interrupted: the cell was stopped (SIGINT) at ${filename}; the kernel and its state are kept\n`;
    } else {
      status = 'error';
      traceback = errorText(err, filename, typeof req.code === 'string' ? req.code : '');
    }
  }
  // Let rejections no one handled surface (they are reported a tick later).
  await new Promise((r) => setImmediate(r));
  current = null;
  const seen = reads;
  reads = null;
  state.interrupt = null;
  if (state.errors.length) {
    if (status === 'ok') status = 'error';
    traceback += state.errors.join('');
  }
  const usage = selfUsage();
  lastChildrenCpu = childrenCpu();
  usage.cpu += lastChildrenCpu;
  const result = {
    type: 'result', id: rid, status, traceback, execution_count: count,
    stdin_requested: stdinRequested,
    usage: {
      cpu_seconds: Math.max(0, Math.round((usage.cpu - cpu0) * 1e6) / 1e6),
      peak_rss_kb: usage.maxRSS,
      wall_seconds: Number(process.hrtime.bigint() - t0) / 1e9,
    },
    display: [],
  };
  if (seen !== null && seen.listed.size > 0) {
    result.read = { paths: [...seen.listed.keys()], total: seen.listed.size + seen.more };
  }
  send(ERR_FD, { type: 'end', id: rid });
  send(OUT_FD, result);
}

async function main() {
  // Nothing else may keep the event loop alive (the reader worker is
  // unref'd): a cell awaiting a promise that never settles must still wait.
  setInterval(() => {}, 1 << 30);
  const hello = await nextRequest();
  if (hello.type !== 'hello') { rawStderr('the first request must be hello'); process.exit(2); }
  if (hello.protocol !== PROTOCOL) { rawStderr(`unsupported protocol ${hello.protocol}`); process.exit(2); }
  if (typeof hello.sentinel !== 'string' || !/^[!-~]+$/.test(hello.sentinel)) {
    rawStderr('the sentinel must be non-empty printable ASCII without whitespace');
    process.exit(2);
  }
  MARK = '\n' + hello.sentinel + ' ';
  if (typeof hello.cwd === 'string' && hello.cwd) {
    try { process.chdir(hello.cwd); } catch (e) { rawStderr(`cannot change to the working directory ${hello.cwd}: ${e.message}`); process.exit(2); }
    globalThis.require = createRequire(path.join(process.cwd(), '[toolcell-cell]'));
    globalThis.__filename = path.join(process.cwd(), '[toolcell-cell]');
    globalThis.__dirname = process.cwd();
  }
  send(OUT_FD, { type: 'ready', protocol: PROTOCOL, pid: process.pid, python: process.versions.node, executable: process.execPath });
  for (;;) {
    const req = await nextRequest();
    if (req.type === 'execute') {
      try { await handleExecute(req); } catch (e) { rawStderr(`internal error: ${e && e.stack}`); }
    } else if (req.type === 'shutdown') {
      process.exit(0);
    } else {
      rawStderr(`unknown request type ${JSON.stringify(req.type)} ignored`);
    }
  }
}

main().catch((e) => { rawStderr(`main loop failed: ${e && e.stack}`); process.exit(70); });
