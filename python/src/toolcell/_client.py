"""Clients of `toolcell serve` (JSON-RPC 2.0, one message per line over stdio).

One reader thread per server reads every line: responses complete the
request's future, `cell/output` notifications go to the stream callback of
the cell running in that session, and `tool/call` requests run the
registered Python function (a pool thread for a plain function, an event
loop for an `async def`), each call on its own, so calls from several
threads of a cell are served concurrently.
"""

import asyncio
import atexit
import collections
import concurrent.futures
import contextvars
import dataclasses
import enum
import inspect
import json
import logging
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from typing import (
    Any,
    Awaitable,
    Callable,
    Deque,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from ._binary import find_toolcell_bin
from ._errors import RPCError, ServerExited, ToolcellError, ToolError
from ._result import ExecuteResult
from ._schema import argument_converter, function_schema, to_json

log = logging.getLogger("toolcell")

PathLike = Union[str, "os.PathLike[str]"]
Config = Union[None, PathLike, Mapping[str, Mapping[str, Any]]]


@dataclass(frozen=True)
class Chunk:
    """A piece of a running cell's output (`stream` is "stdout" or "stderr")."""

    session: str
    stream: str
    text: str


@dataclass(frozen=True)
class ToolCall:
    """The call a client tool function is serving: see `current_tool_call()`."""

    #: the session whose cell made the call
    session: Optional[str]
    #: the tool's name
    name: str
    #: the server's id of the call (a string)
    id: Any
    #: milliseconds left of the cell's time when the call was sent
    deadline_ms: Optional[int]
    #: the connection the call came on (to tell a re-entrant `execute` of the same server)
    _conn: Any = field(default=None, repr=False, compare=False)


_current_call: "contextvars.ContextVar[Optional[ToolCall]]" = contextvars.ContextVar(
    "toolcell_tool_call", default=None
)


def current_tool_call() -> Optional[ToolCall]:
    """The call being served, inside a client tool function (sync or async); else None.

    A tool registered once for every session can tell the sessions apart:
    ``current_tool_call().session``.
    """
    return _current_call.get()


async def _serving(call: Optional[ToolCall], coro: Awaitable[Any]) -> Any:
    """Await `coro` with `call` as the current tool call (in the awaiting task's own context)."""
    _current_call.set(call)  # the task's own context: nothing leaks out
    return await coro


def _check_not_reentrant(conn: "_Connection", session: str) -> None:
    """Refuse a cell of `session` asked for from inside a tool call that a cell of `session` made.

    The server runs a session's cells one at a time: the new cell would
    wait for the running one, which waits for this tool call, until the
    cell's timeout.
    """
    call = _current_call.get()
    if call is not None and call._conn is conn and call.session == session:
        raise ToolcellError(
            f"execute: called from inside the tool call {call.name!r} of a cell of session {session!r}, "
            "which waits for that call; a cell of the same session would wait for that cell until its "
            "timeout. Run the nested work in another session (give a sub-agent its own session)."
        )


_UNSET: Any = object()


@dataclass
class Tool:
    """A registered client tool."""

    name: str
    fn: Callable[..., Any]
    description: str
    input_schema: Dict[str, Any]
    output_schema: Optional[Dict[str, Any]]
    session: Optional[str]
    is_async: bool
    # how its arguments are converted (see `_schema.argument_converter`); computed on the first call
    _convert: Any = field(default=_UNSET, init=False, repr=False, compare=False)

    def definition(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"name": self.name, "description": self.description, "input_schema": self.input_schema}
        if self.output_schema:
            d["output_schema"] = self.output_schema
        return d


# ---------------------------------------------------------------- config


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"toolcell config: cannot write {type(v).__name__} value {v!r} as TOML")


def _write_config(config: Mapping[str, Mapping[str, Any]]) -> str:
    """A toolcell.toml holding `config` ({"execution": {"timeout": 30}, ...}); its path."""
    lines: List[str] = []
    for section, values in config.items():
        if not isinstance(values, Mapping):
            raise TypeError(f"toolcell config: section {section!r} must be a dict of keys, got {values!r}")
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{json.dumps(str(key))} = {_toml_value(value)}")
        lines.append("")
    fd, path = tempfile.mkstemp(prefix="toolcell-", suffix=".toml")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines))
    return path


# ---------------------------------------------------------------- the connection

_live: "weakref.WeakSet[_Connection]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # pragma: no cover - runs at interpreter exit
    for conn in list(_live):
        try:
            conn.close(timeout=5)
        except Exception:
            pass


class _Pending:
    __slots__ = ("future", "method", "session", "on_chunk")

    def __init__(self, method: str, session: Optional[str], on_chunk: Optional[Callable[[Chunk], None]]):
        self.future: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        self.method = method
        self.session = session
        self.on_chunk = on_chunk


class _Connection:
    """A `toolcell serve` child and the threads that talk to it."""

    def __init__(
        self,
        config: Config,
        cwd: Optional[PathLike],
        binary: Optional[str],
        args: Sequence[str],
        env: Optional[Mapping[str, str]],
        max_tool_threads: int,
        run_coroutine: Optional[Callable[[Awaitable[Any]], "concurrent.futures.Future[Any]"]],
    ):
        self.binary = binary or find_toolcell_bin()
        self._temp_config: Optional[str] = None
        cmd = [self.binary, "serve"]
        if config is not None:
            if isinstance(config, Mapping):
                self._temp_config = _write_config(config)
                cmd += ["--config", self._temp_config]
            else:
                cmd += ["--config", os.fspath(config)]
        cmd += list(args)
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=os.fspath(cwd) if cwd is not None else None,
                env=dict(env) if env is not None else None,
                start_new_session=False,
            )
        except OSError as e:
            self._drop_config()
            raise ToolcellError(f"could not start {self.binary} serve: {e}") from e
        self._lock = threading.Lock()  # guards the maps below
        self._write_lock = threading.Lock()
        self._pending: Dict[int, _Pending] = {}
        self._streams: Dict[str, Deque[int]] = collections.defaultdict(collections.deque)
        self._tools: Dict[Tuple[Optional[str], str], Tool] = {}
        self._calls: Dict[Any, "concurrent.futures.Future[Any]"] = {}
        self.cancelled_calls: List[Any] = []  # ids the server cancelled (most recent last, bounded)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_tool_threads, thread_name_prefix="toolcell-tool")
        self._run_coroutine = run_coroutine
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread: Optional[threading.Thread] = None
        self._closed = False
        self._eof = False  # the reader saw the end of serve's stdout
        self.exit_status: Optional[int] = None
        # serve's stderr (logs, a config error) is passed on to ours, and its
        # last lines are kept for the error raised when it exits.
        self.stderr_tail: Deque[str] = collections.deque(maxlen=20)
        self._stderr_reader = threading.Thread(target=self._read_stderr, name="toolcell-stderr", daemon=True)
        self._stderr_reader.start()
        self._reader = threading.Thread(target=self._read, name="toolcell-reader", daemon=True)
        self._reader.start()
        _live.add(self)

    # ---- writing

    def _send(self, msg: Dict[str, Any]) -> None:
        # Strict JSON: NaN/Infinity or a lone surrogate would make a line the server cannot parse
        # (it drops it, and whoever waits for that message waits for good): ValueError instead.
        self._write(_encode_line(msg))

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            stdin = self.proc.stdin
            if stdin is None or stdin.closed:
                raise ServerExited("toolcell serve is closed")
            try:
                stdin.write(data)
                stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as e:
                raise ServerExited(f"toolcell serve is gone ({e})") from e

    def request(
        self,
        method: str,
        params: Dict[str, Any],
        on_chunk: Optional[Callable[[Chunk], None]] = None,
    ) -> Tuple[int, "concurrent.futures.Future[Any]"]:
        """Send a request; its id and a future of its `result` (RPCError on `error`)."""
        session = params.get("session", "default") if method == "execute" else None
        pending = _Pending(method, session, on_chunk)
        with self._lock:
            if self._closed:
                raise ServerExited("this toolcell client is closed")
            if self._eof:
                raise ServerExited(self._exit_message(method))
            # Unpredictable ids: whoever could write into our stdin cannot
            # answer a request of ours it has not seen.
            rid = _new_id()
            while rid in self._pending:
                rid = _new_id()
            self._pending[rid] = pending
            if on_chunk is not None and session is not None:
                self._streams[session].append(rid)
        try:
            self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        except ValueError as e:  # not strict JSON (NaN, a lone surrogate): never sent
            self._settle(rid)
            raise ValueError(f"{method}: the request's parameters are not valid JSON ({e})") from None
        except ServerExited:
            self._settle(rid)
            if self._closed or threading.current_thread() is self._reader:
                raise
            # the server died under us: say why, once the reader has seen its end
            self._reader.join(timeout=5)
            if self._eof:
                raise ServerExited(self._exit_message(method)) from None
            raise
        return rid, pending.future

    def notify(self, method: str, params: Dict[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def cancel(self, rid: int) -> None:
        """Ask the server to cancel request `rid` (`$/cancelRequest`)."""
        try:
            self.notify("$/cancelRequest", {"id": rid})
        except ServerExited:
            pass

    def _settle(self, rid: Any) -> Optional[_Pending]:
        with self._lock:
            pending = self._pending.pop(rid, None)
            if pending is not None and pending.on_chunk is not None and pending.session is not None:
                queue = self._streams.get(pending.session)
                if queue is not None:
                    try:
                        queue.remove(rid)
                    except ValueError:
                        pass
                    if not queue:
                        del self._streams[pending.session]
        return pending

    # ---- reading

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            for raw in stdout:
                try:
                    msg = json.loads(raw)
                except ValueError:
                    log.warning("toolcell serve sent a line that is not JSON: %r", raw[:200])
                    continue
                try:
                    self._dispatch(msg)
                except Exception:  # a bug here must not stop the reader
                    log.exception("toolcell: handling a message from serve failed")
        except (OSError, ValueError):
            pass
        finally:
            self._on_eof()

    def _read_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        try:
            for raw in stderr:
                line = raw.decode("utf-8", "replace")
                self.stderr_tail.append(line.rstrip("\n"))
                try:
                    sys.stderr.write(line)
                    sys.stderr.flush()
                except (OSError, ValueError, AttributeError):
                    pass
        except (OSError, ValueError):
            pass

    def _dispatch(self, msg: Any) -> None:
        if isinstance(msg, list):  # a batch answer
            for m in msg:
                self._dispatch(m)
            return
        if not isinstance(msg, dict):
            return
        method = msg.get("method")
        if method is None:
            rid = msg.get("id")
            pending = self._settle(rid)
            if pending is None:
                return
            if "error" in msg and isinstance(msg["error"], dict):
                err = msg["error"]
                pending.future.set_exception(
                    RPCError(err.get("code", 0), str(err.get("message", "")), err.get("data"), pending.method)
                )
            else:
                pending.future.set_result(msg.get("result"))
        elif method == "cell/output":
            p = msg.get("params") or {}
            session = p.get("session", "default")
            with self._lock:
                queue = self._streams.get(session)
                pending = self._pending.get(queue[0]) if queue else None
            if pending is not None and pending.on_chunk is not None:
                try:
                    pending.on_chunk(Chunk(session, p.get("stream", "stdout"), p.get("chunk", "")))
                except Exception:
                    log.exception("toolcell: the stream callback raised")
        elif method == "tool/call":
            self._tool_call(msg)
        elif method == "$/cancelRequest":
            cid = (msg.get("params") or {}).get("id")
            with self._lock:
                fut = self._calls.pop(cid, None)
                self.cancelled_calls.append(cid)
                del self.cancelled_calls[:-100]
            if fut is not None:
                fut.cancel()  # an async tool's task is cancelled; a thread runs on, its answer dropped

    def _on_eof(self) -> None:
        try:
            self.exit_status = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.exit_status = None
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
            self._streams.clear()
            calls = list(self._calls.values())
            self._calls.clear()
        self._stderr_reader.join(timeout=2)
        with self._lock:
            self._eof = True
        for p in pending:
            if not p.future.done():
                p.future.set_exception(ServerExited(self._exit_message(p.method)))
        for c in calls:
            c.cancel()

    def _exit_message(self, method: str) -> str:
        if self._closed:
            return f"toolcell serve was closed before answering {method}"
        tail = "".join(f"\n  {line}" for line in list(self.stderr_tail)[-5:])
        return f"toolcell serve exited (status {self.exit_status}) before answering {method}{tail}"

    # ---- tools

    def add_tools(self, tools: List[Tool]) -> None:
        with self._lock:
            for t in tools:
                self._tools[(t.session, t.name)] = t

    def remove_tools(self, names: Sequence[str], session: Optional[str]) -> None:
        with self._lock:
            for n in names:
                self._tools.pop((session, n), None)

    def _tool_call(self, msg: Dict[str, Any]) -> None:
        cid = msg.get("id")
        p = msg.get("params") or {}
        name = p.get("name", "")
        session = p.get("session")
        arguments = p.get("arguments") or {}
        with self._lock:
            tool = self._tools.get((session, name)) or self._tools.get((None, name))
            running = any(
                p.method == "execute" and p.session == (session or "default") for p in self._pending.values()
            )
        if not running:
            # A tool call comes from a running cell; one for a session with
            # no cell of ours running was not sent by a cell of ours.
            self._answer(cid, error={"code": -32600, "message": f"no cell of session {session!r} is running"})
            return
        if tool is None:
            self._answer(cid, error={"code": -32601, "message": f"this client has no tool named {name!r}"})
            return
        convert = tool._convert
        if convert is _UNSET:
            convert = tool._convert = argument_converter(tool.fn)
        try:
            kwargs = convert(arguments) if convert is not None else arguments
        except Exception as e:
            self._answer(cid, error=_error_of(e))
            return
        deadline = p.get("deadline_ms")
        call = ToolCall(session=session, name=name, id=cid,
                        deadline_ms=deadline if isinstance(deadline, int) else None, _conn=self)
        fut: "concurrent.futures.Future[Any]"
        try:
            if tool.is_async:
                inner = tool.fn(**kwargs)
                outer = _serving(call, inner)
                try:
                    fut = self._coroutine_runner()(outer)
                except BaseException:
                    for c in (outer, inner):
                        close = getattr(c, "close", None)
                        if close is not None:
                            close()  # never run: no "was never awaited" warning
                    raise
            else:
                ctx = contextvars.copy_context()
                ctx.run(_current_call.set, call)
                fut = self._pool.submit(ctx.run, tool.fn, **kwargs)
        except Exception as e:  # the pool is shut down, or calling the coroutine function failed
            self._answer(cid, error=_error_of(e))
            return
        with self._lock:
            self._calls[cid] = fut
        fut.add_done_callback(lambda f: self._call_done(cid, name, f))

    def _call_done(self, cid: Any, name: str, fut: "concurrent.futures.Future[Any]") -> None:
        with self._lock:
            mine = self._calls.pop(cid, None) is fut
        if not mine or fut.cancelled():
            return  # cancelled by the server: it no longer waits for an answer
        exc = fut.exception()
        if exc is not None:
            self._answer(cid, error=_error_of(exc))
            return
        # The answer is serialized once: dataclasses, enums and sets through `default`;
        # only a value that still is not JSON (a dict with tuple keys, say) takes `to_json` first.
        # Strictly: a line the server cannot parse (NaN, a lone surrogate) would never answer the
        # call, and the cell would wait until its timeout; the cell gets a ToolError at once instead.
        msg = {"jsonrpc": "2.0", "id": cid, "result": fut.result()}
        try:
            data = _encode_line(msg, _encode_answer)
        except UnicodeEncodeError as e:
            self._answer(cid, error={"code": -32000, "message": _unicode_problem(e)})
            return
        except (TypeError, ValueError, RecursionError):
            try:
                msg["result"] = to_json(msg["result"])
                data = _encode_line(msg, _encode_answer)
            except UnicodeEncodeError as e:
                self._answer(cid, error={"code": -32000, "message": _unicode_problem(e)})
                return
            except (TypeError, ValueError, RecursionError) as e:
                self._answer(cid, error={"code": -32000, "message": _json_problem(e)})
                return
        try:
            self._write(data)
        except ServerExited:
            pass

    def _answer(self, cid: Any, result: Any = None, error: Optional[Dict[str, Any]] = None) -> None:
        msg: Dict[str, Any] = {"jsonrpc": "2.0", "id": cid}
        if error is not None:
            msg["error"] = error
        else:
            msg["result"] = result
        try:
            try:
                self._send(msg)
            except ValueError:  # an error message with a lone surrogate (say): answered all the same
                self._write(_encode_line(msg, _encode_lenient, errors="replace"))
        except ServerExited:
            pass

    def _coroutine_runner(self) -> Callable[[Awaitable[Any]], "concurrent.futures.Future[Any]"]:
        if self._run_coroutine is not None:
            return self._run_coroutine
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                t = threading.Thread(target=loop.run_forever, name="toolcell-async-tools", daemon=True)
                t.start()
                self._loop, self._loop_thread = loop, t
            loop = self._loop
        return lambda coro: asyncio.run_coroutine_threadsafe(coro, loop)  # type: ignore[arg-type]

    # ---- the end

    def close(self, timeout: float = 10.0) -> Optional[int]:
        """End the server: EOF on its stdin, then wait (kill after `timeout`)."""
        with self._lock:
            already = self._closed
            self._closed = True
        if not already:
            with self._write_lock:
                try:
                    if self.proc.stdin is not None:
                        self.proc.stdin.close()
                except OSError:
                    pass
        try:
            self.exit_status = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.exit_status = self.proc.wait()
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=5)
        if threading.current_thread() is not self._stderr_reader:
            self._stderr_reader.join(timeout=5)
        # The readers are done with the pipes (the server exited): close them.
        for pipe, reader in ((self.proc.stdout, self._reader), (self.proc.stderr, self._stderr_reader)):
            if pipe is not None and not reader.is_alive():
                try:
                    pipe.close()
                except OSError:
                    pass
        self._pool.shutdown(wait=False)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._drop_config()
        _live.discard(self)
        return self.exit_status

    def _drop_config(self) -> None:
        if self._temp_config:
            try:
                os.unlink(self._temp_config)
            except OSError:
                pass
            self._temp_config = None


def _json_default(value: Any) -> Any:
    """What `json` lacks, as `to_json` gives it: dataclasses as dicts, enums as their values, sets as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_encode_answer = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_json_default,
                                  allow_nan=False).encode
_encode_strict = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_encode_lenient = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


def _encode_line(msg: Any, encode: Callable[[Any], str] = _encode_strict, errors: str = "strict") -> bytes:
    """`msg` as one line of strict JSON, UTF-8 (ValueError for NaN/Infinity, UnicodeEncodeError for a lone
    surrogate: ``serve`` cannot parse either; ``errors="replace"`` turns a lone surrogate into ``?``)."""
    return (encode(msg) + "\n").encode("utf-8", errors)


def _json_problem(e: BaseException) -> str:
    # (the cell's ToolError starts with the tool's name already)
    text = str(e)
    if "Out of range float" in text:
        return ("the tool returned a value that is not JSON: it holds NaN or Infinity, which JSON has no "
                "numbers for (return None, or the value as a string)")
    return f"the tool returned a value that is not JSON: {text}"


def _unicode_problem(e: UnicodeEncodeError) -> str:
    return (f"the tool returned text that is not valid Unicode: a lone surrogate "
            f"({e.object[e.start:e.end]!a}), which UTF-8 cannot encode (decode bytes with "
            "errors='replace', or drop it)")


def _new_id() -> int:
    """A request id nobody can guess (53 bits: exact in every JSON reader)."""
    return secrets.randbits(53) or 1


def _error_of(exc: BaseException) -> Dict[str, Any]:
    if isinstance(exc, ToolError):
        return {"code": exc.code, "message": exc.message}
    if isinstance(exc, (concurrent.futures.CancelledError, asyncio.CancelledError)):
        return {"code": -32800, "message": "the tool call was cancelled"}
    text = str(exc)
    return {"code": -32000, "message": f"{type(exc).__name__}: {text}" if text else type(exc).__name__}


# ---------------------------------------------------------------- the public clients


def _execute_params(code: str, session: str, timeout: Optional[float], stream: bool, reset: bool,
                    extra: Dict[str, Any]) -> Dict[str, Any]:
    params: Dict[str, Any] = {"code": code, "session": session}
    if timeout is not None:
        params["timeout"] = timeout
    if reset:
        params["reset"] = True
    if stream:
        params["stream"] = True
    for k, v in extra.items():
        if v is not None:
            params[k] = os.fspath(v) if k == "cwd" else v
    return params


def _schema_tool(name: str, fn: Callable[..., Any], input_schema: Mapping[str, Any], description: str,
                 output_schema: Optional[Mapping[str, Any]], session: Optional[str]) -> Tool:
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_tool: the name must be a non-empty string, got {name!r}")
    if not callable(fn):
        raise TypeError(f"register_tool: expected a function for {name!r}, got {fn!r}")
    if not isinstance(input_schema, Mapping):
        raise TypeError(f"register_tool: the input schema of {name!r} must be a JSON Schema object (a dict)")
    return Tool(
        name=name,
        fn=fn,
        description=description or "",
        input_schema=dict(input_schema),
        output_schema=dict(output_schema) if output_schema else None,
        session=session,
        is_async=inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__),
    )


def _schema_tools(specs: Sequence[Mapping[str, Any]], session: Optional[str]) -> List[Tool]:
    out: List[Tool] = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, Mapping):
            raise TypeError(f"register_tools: entry {i} must be a dict with name, fn and input_schema, got {spec!r}")
        unknown = set(spec) - {"name", "fn", "input_schema", "description", "output_schema"}
        if unknown:
            raise TypeError(f"register_tools: entry {i} has unknown keys {sorted(unknown)}")
        missing = [k for k in ("name", "fn", "input_schema") if k not in spec]
        if missing:
            raise TypeError(f"register_tools: entry {i} lacks {', '.join(missing)}")
        out.append(_schema_tool(spec["name"], spec["fn"], spec["input_schema"], spec.get("description") or "",
                                spec.get("output_schema"), session))
    return out


class _Base:
    _conn: _Connection

    def _make_tool(self, fn: Callable[..., Any], name: Optional[str], description: Optional[str],
                   session: Optional[str]) -> Tool:
        if not callable(fn):
            raise TypeError(f"tool: expected a function, got {fn!r}")
        input_schema, output_schema, doc = function_schema(fn)
        return Tool(
            name=name or str(getattr(fn, "__name__", "tool")),
            fn=fn,
            description=description if description is not None else doc,
            input_schema=input_schema,
            output_schema=output_schema,
            session=session,
            is_async=inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__),
        )

    def _tool_decorator(self, fn: Optional[Callable[..., Any]], name: Optional[str], description: Optional[str],
                        session: Optional[str], register: Callable[[List[Tool]], Any]) -> Any:
        def deco(f: Callable[..., Any]) -> Callable[..., Any]:
            register([self._make_tool(f, name, description, session)])
            return f

        if fn is not None:
            return deco(fn)
        return deco

    @property
    def pid(self) -> int:
        """The process id of the `toolcell serve` child."""
        return self._conn.proc.pid

    @property
    def binary(self) -> str:
        """The toolcell binary this client runs."""
        return self._conn.binary

    @property
    def stderr_tail(self) -> List[str]:
        """The last lines the server wrote to stderr (at most 20)."""
        return list(self._conn.stderr_tail)

    @property
    def cancelled_calls(self) -> List[Any]:
        """Ids of tool calls the server cancelled (the last 100)."""
        with self._conn._lock:
            return list(self._conn.cancelled_calls)

    @property
    def tools(self) -> Dict[str, Tool]:
        """The client tools registered through this client, by name (session-scoped ones as `session/name`)."""
        with self._conn._lock:
            return {(f"{s}/{n}" if s else n): t for (s, n), t in self._conn._tools.items()}


class Toolcell(_Base):
    """A `toolcell serve` child and a client for it.

    `config`: a toolcell.toml path, or a dict of sections written to a
    temporary one (``{"execution": {"max_tool_calls": 200}}``); `cwd`: the
    server's working directory (the default working directory of kernels).
    `binary` (else ``$TOOLCELL``, else the binary installed with this
    package), extra `args` for `toolcell serve` (``["--timeout", "30"]``)
    and the child's `env` may be given too.

    Use it as a context manager, or call `close()`; a client still open at
    interpreter exit is closed then.
    """

    def __init__(
        self,
        config: Config = None,
        cwd: Optional[PathLike] = None,
        *,
        binary: Optional[str] = None,
        args: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None,
        max_tool_threads: int = 32,
    ):
        self._conn = _Connection(config, cwd, binary, args, env, max_tool_threads, None)

    def __enter__(self) -> "Toolcell":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Toolcell pid={self._conn.proc.pid} binary={self._conn.binary!r}>"

    def _wait(self, rid: int, fut: "concurrent.futures.Future[Any]") -> Any:
        try:
            return fut.result()
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                self._conn.cancel(rid)  # the caller stopped waiting: stop the request too
            raise

    def _call(self, method: str, params: Dict[str, Any]) -> Any:
        rid, fut = self._conn.request(method, params)
        return self._wait(rid, fut)

    def execute(
        self,
        code: str,
        session: str = "default",
        timeout: Optional[float] = None,
        stream: Optional[Callable[[Chunk], Any]] = None,
        *,
        reset: bool = False,
        **params: Any,
    ) -> ExecuteResult:
        """Run a cell of Python in `session`'s kernel and return how it ended.

        `timeout` (seconds) overrides the configured one; `stream` is called
        with each `Chunk` of output while the cell runs (on the reader thread:
        keep it quick); `reset` runs the cell in a fresh kernel. Other
        parameters of `execute` (`mode`, `tools`, `cwd`) pass through. A cell
        that fails is a result with `status` "error", "timeout", ...; a
        request the server refuses raises `RPCError`. Ctrl-C while waiting
        cancels the cell.
        """
        _check_not_reentrant(self._conn, session)
        p = _execute_params(code, session, timeout, stream is not None, reset, params)
        rid, fut = self._conn.request("execute", p, on_chunk=stream)
        return ExecuteResult.from_dict(self._wait(rid, fut))

    def tool(
        self,
        fn: Optional[Callable[..., Any]] = None,
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        session: Optional[str] = None,
    ) -> Any:
        """Register a function as a client tool: `@tc.tool` or `@tc.tool(name=..., description=...)`.

        The cell calls it as a Python function of that name. Its JSON Schema
        comes from the signature, type hints and docstring; `async def`
        functions run on an event loop, others on a pool thread. Without
        `session` the tool is for every session of this client. Returns the
        function unchanged.
        """
        return self._tool_decorator(fn, name, description, session, self._register)

    def register(self, *fns: Callable[..., Any], session: Optional[str] = None) -> List[str]:
        """Register several functions at once (one request); the names registered."""
        tools = [self._make_tool(f, None, None, session) for f in fns]
        return self._register(tools)

    def _register(self, tools: List[Tool]) -> List[str]:
        by_session: Dict[Optional[str], List[Tool]] = collections.defaultdict(list)
        for t in tools:
            by_session[t.session].append(t)
        names: List[str] = []
        for session, group in by_session.items():
            params: Dict[str, Any] = {"tools": [t.definition() for t in group]}
            if session is not None:
                params["session"] = session
            self._conn.add_tools(group)
            try:
                names += self._call("tools/register", params).get("registered", [])
            except BaseException:
                self._conn.remove_tools([t.name for t in group], session)
                raise
        return names

    def register_tool(
        self,
        name: str,
        fn: Callable[..., Any],
        input_schema: Mapping[str, Any],
        *,
        description: str = "",
        output_schema: Optional[Mapping[str, Any]] = None,
        session: Optional[str] = None,
    ) -> List[str]:
        """Register a client tool whose JSON Schema you already have (a framework's tool, say).

        `fn` is called with the arguments as keyword arguments (one per
        property of `input_schema`, which the server checks first); it may
        be an `async def` function. The names registered.
        """
        return self._register([_schema_tool(name, fn, input_schema, description, output_schema, session)])

    def register_tools(self, tools: Sequence[Mapping[str, Any]], *, session: Optional[str] = None) -> List[str]:
        """`register_tool` for several tools in one request.

        Each entry is a dict with ``name``, ``fn``, ``input_schema`` and
        optionally ``description`` and ``output_schema``. All or none are
        registered. The names registered.
        """
        return self._register(_schema_tools(tools, session))

    def unregister(self, *names: str, session: Optional[str] = None) -> List[str]:
        """Remove client tools; the names removed."""
        params: Dict[str, Any] = {"names": list(names)}
        if session is not None:
            params["session"] = session
        out = self._call("tools/unregister", params).get("unregistered", [])
        self._conn.remove_tools(names, session)
        return out

    def schema(self, format: str = "openai", session: Optional[str] = None) -> Dict[str, Any]:
        """The `execute_code` tool definition for a model (`openai`, `anthropic` or `mcp` shape).

        Its description lists every tool the session's cells can call,
        client tools included.
        """
        params: Dict[str, Any] = {"format": format}
        if session is not None:
            params["session"] = session
        return self._call("schema", params)

    def sessions(self) -> List[Dict[str, Any]]:
        """The live kernels: session, kernel_id, pid, execution_count, idle_seconds, busy, ..."""
        return self._call("sessions", {}).get("sessions", [])

    def interrupt(self, session: str = "default") -> int:
        """Interrupt the cell running in `session` now; the number of kernels signalled."""
        return self._call("interrupt", {"session": session}).get("interrupted", 0)

    def shutdown_session(self, session: str = "default") -> int:
        """End `session` (after its queued cells): its kernels and their state are gone."""
        return self._call("shutdown_session", {"session": session}).get("shut_down", 0)

    def close(self, timeout: float = 10.0) -> Optional[int]:
        """End the server and every kernel (EOF on its stdin); its exit status."""
        return self._conn.close(timeout)


class AsyncToolcell(_Base):
    """`Toolcell` for asyncio hosts: the same API, with `await`.

    ``async with AsyncToolcell() as tc: r = await tc.execute("1 + 1")``.
    `async def` tools run on the event loop that created the client (once
    that loop is closed, on the loop of the next call: a client outlives an
    `asyncio.run`); plain functions on pool threads; `stream` callbacks are
    called on the loop awaiting the cell (an `async def` callback is
    scheduled as a task).
    `@tc.tool` registers at once in the background; the next request waits
    for it (a registration error is raised there).
    """

    def __init__(
        self,
        config: Config = None,
        cwd: Optional[PathLike] = None,
        *,
        binary: Optional[str] = None,
        args: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None,
        max_tool_threads: int = 32,
    ):
        try:
            self._loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._registrations: List[Tuple[List[Tool], "concurrent.futures.Future[Any]"]] = []
        self._conn = _Connection(config, cwd, binary, args, env, max_tool_threads, self._run_coroutine)

    def _host_loop(self) -> asyncio.AbstractEventLoop:
        # The loop that created the client, or — once that one is closed
        # (a second `asyncio.run`) — the one running now.
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.get_running_loop()
        return self._loop

    def _run_coroutine(self, coro: Awaitable[Any]) -> "concurrent.futures.Future[Any]":
        if self._loop is None or self._loop.is_closed():
            raise ToolcellError("AsyncToolcell: no event loop to run async tools on (create the client inside one)")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]

    async def __aenter__(self) -> "AsyncToolcell":
        self._host_loop()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncToolcell pid={self._conn.proc.pid} binary={self._conn.binary!r}>"

    async def _await(self, rid: int, fut: "concurrent.futures.Future[Any]") -> Any:
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            self._conn.cancel(rid)  # the awaiting task was cancelled: cancel the request too
            raise

    async def _flush(self) -> None:
        while self._registrations:
            tools, fut = self._registrations.pop(0)
            try:
                await asyncio.wrap_future(fut)
            except BaseException:
                for t in tools:
                    self._conn.remove_tools([t.name], t.session)
                raise

    async def _call(self, method: str, params: Dict[str, Any]) -> Any:
        await self._flush()
        rid, fut = self._conn.request(method, params)
        return await self._await(rid, fut)

    async def execute(
        self,
        code: str,
        session: str = "default",
        timeout: Optional[float] = None,
        stream: Optional[Callable[[Chunk], Any]] = None,
        *,
        reset: bool = False,
        **params: Any,
    ) -> ExecuteResult:
        """Run a cell (see `Toolcell.execute`); cancelling the awaiting task cancels the cell."""
        _check_not_reentrant(self._conn, session)
        await self._flush()
        self._host_loop()
        loop = asyncio.get_running_loop()  # chunks go to the loop awaiting this cell
        on_chunk = None
        if stream is not None:
            cb = stream

            def on_chunk(chunk: Chunk) -> None:
                def deliver() -> None:
                    out = cb(chunk)
                    if inspect.isawaitable(out):
                        asyncio.ensure_future(out)

                loop.call_soon_threadsafe(deliver)

        p = _execute_params(code, session, timeout, stream is not None, reset, params)
        rid, fut = self._conn.request("execute", p, on_chunk=on_chunk)
        return ExecuteResult.from_dict(await self._await(rid, fut))

    def tool(
        self,
        fn: Optional[Callable[..., Any]] = None,
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        session: Optional[str] = None,
    ) -> Any:
        """Register a function as a client tool (see `Toolcell.tool`)."""
        return self._tool_decorator(fn, name, description, session, self._register_soon)

    def _register_soon(self, tools: List[Tool]) -> None:
        for t in tools:
            params: Dict[str, Any] = {"tools": [t.definition()]}
            if t.session is not None:
                params["session"] = t.session
            self._conn.add_tools([t])
            _, fut = self._conn.request("tools/register", params)
            self._registrations.append(([t], fut))

    async def register(self, *fns: Callable[..., Any], session: Optional[str] = None) -> List[str]:
        """Register several functions and wait for the server; the names registered."""
        tools = [self._make_tool(f, None, None, session) for f in fns]
        params: Dict[str, Any] = {"tools": [t.definition() for t in tools]}
        if session is not None:
            params["session"] = session
        self._conn.add_tools(tools)
        try:
            return (await self._call("tools/register", params)).get("registered", [])
        except BaseException:
            self._conn.remove_tools([t.name for t in tools], session)
            raise

    async def register_tool(
        self,
        name: str,
        fn: Callable[..., Any],
        input_schema: Mapping[str, Any],
        *,
        description: str = "",
        output_schema: Optional[Mapping[str, Any]] = None,
        session: Optional[str] = None,
    ) -> List[str]:
        """Register a client tool from its JSON Schema and wait (see `Toolcell.register_tool`)."""
        return await self._register_now([_schema_tool(name, fn, input_schema, description, output_schema, session)],
                                        session)

    async def register_tools(self, tools: Sequence[Mapping[str, Any]], *,
                             session: Optional[str] = None) -> List[str]:
        """`register_tool` for several tools in one request (see `Toolcell.register_tools`)."""
        return await self._register_now(_schema_tools(tools, session), session)

    async def _register_now(self, tools: List[Tool], session: Optional[str]) -> List[str]:
        params: Dict[str, Any] = {"tools": [t.definition() for t in tools]}
        if session is not None:
            params["session"] = session
        self._conn.add_tools(tools)
        try:
            return (await self._call("tools/register", params)).get("registered", [])
        except BaseException:
            self._conn.remove_tools([t.name for t in tools], session)
            raise

    async def unregister(self, *names: str, session: Optional[str] = None) -> List[str]:
        params: Dict[str, Any] = {"names": list(names)}
        if session is not None:
            params["session"] = session
        out = (await self._call("tools/unregister", params)).get("unregistered", [])
        self._conn.remove_tools(names, session)
        return out

    async def schema(self, format: str = "openai", session: Optional[str] = None) -> Dict[str, Any]:
        params: Dict[str, Any] = {"format": format}
        if session is not None:
            params["session"] = session
        return await self._call("schema", params)

    async def sessions(self) -> List[Dict[str, Any]]:
        return (await self._call("sessions", {})).get("sessions", [])

    async def interrupt(self, session: str = "default") -> int:
        return (await self._call("interrupt", {"session": session})).get("interrupted", 0)

    async def shutdown_session(self, session: str = "default") -> int:
        return (await self._call("shutdown_session", {"session": session})).get("shut_down", 0)

    async def aclose(self, timeout: float = 10.0) -> Optional[int]:
        """End the server and every kernel; its exit status."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._conn.close, timeout)

    def close(self, timeout: float = 10.0) -> Optional[int]:
        """End the server from synchronous code (blocks up to `timeout`)."""
        return self._conn.close(timeout)
