"""What every framework adapter shares: the text a model reads for a cell,
tool results as JSON, the end-of-chunks marker of the adapters that relay
a cell's output from a worker thread, the tools of an adapter registered
once per client (:class:`ToolSet`), and the checks and clean-ups around
them."""

import contextlib
import json
import logging
import threading
import weakref
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from .._client import Toolcell, _current_call, current_tool_call
from .._errors import ToolError
from .._result import ExecuteResult

log = logging.getLogger("toolcell")


def result_text(result: ExecuteResult) -> str:
    """The cell's result as the text a model should read.

    The cleaned output (stdout, then stderr and the traceback) comes first;
    then, each on its own line and only when present, ``error: …``,
    ``hint: …`` and ``warning: …``; a cell that printed nothing and
    succeeded reads ``(no output)``. Fields such as the kernel, usage and
    the files report stay in the structured result.
    """
    parts: List[str] = []
    out = result.output or ""
    if out:
        parts.append(out if out.endswith("\n") else out + "\n")
    if result.status != "success":
        parts.append(f"status: {result.status}\n")
    if result.error:
        parts.append(f"error: {result.error}\n")
    if result.hint:
        parts.append(f"hint: {result.hint}\n")
    if result.warning:
        parts.append(f"warning: {result.warning}\n")
    if not parts:
        return "(no output)"
    return "".join(parts).rstrip("\n")


class _Done:
    """Marks the end of a cell's chunks in a queue."""


DONE = _Done()

_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any, budget: List[int]) -> bool:
    """Whether `value` is JSON made of dicts (str keys), lists and scalars alone, looking at most `budget` values."""
    budget[0] -= 1
    if budget[0] < 0:  # too big to look at in Python: the caller probes it with json
        return False
    t = type(value)
    if t in _SCALARS:
        return True
    if t is dict:
        return all(type(k) is str and _plain(v, budget) for k, v in value.items())
    if t is list:
        return all(_plain(v, budget) for v in value)
    return False


def jsonable(value: Any, default: Callable[[Any], Any]) -> Any:
    """A tool's return value as JSON: as is when it is, else through
    `json.dumps(default=...)` (`default` turns what JSON lacks into what it
    has: a pydantic model's dump, a message's text, ``str()``).

    A scalar, or a small dict or list of plain JSON values, is returned at
    once (the client serializes it, once); anything else is probed.
    """
    if type(value) in _SCALARS or _plain(value, [64]):
        return value
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=default))


# ---------------------------------------------------------------- re-entrance


def reentrant(client: Toolcell, session: str) -> bool:
    """Whether this runs inside a tool call that a cell of `session` on `client` made (and waits for).

    A cell of that session asked for now would wait for the running one,
    which waits for this call: the adapters refuse it at once.
    """
    call = current_tool_call()
    return call is not None and call.session == session and call._conn is client._conn


def reentrance_message(tool: str, session: str) -> str:
    return (
        f"{tool} was called from inside a cell of the same toolcell session ({session!r}): a tool that cell "
        "called started a run that uses this code tool in the same conversation, and its cell would wait "
        "for the running one, which waits for it. Give the nested agent its own session (another "
        "thread or session name, or its own code tool)."
    )


# ---------------------------------------------------------------- one adapter's tools on a client


class ToolDef(NamedTuple):
    """One tool of an adapter: `fn(**arguments)` runs it (a plain function, called on a pool thread)."""

    name: str
    fn: Callable[..., Any]
    input_schema: Dict[str, Any]
    description: str = ""
    output_schema: Optional[Dict[str, Any]] = None


def _key(t: ToolDef) -> str:
    return json.dumps([t.input_schema, t.description, t.output_schema], sort_keys=True, default=str)


class _Name:
    __slots__ = ("key", "owners")

    def __init__(self, key: str):
        self.key = key
        self.owners = 0


class _Router:
    """The adapters' tools on one client: each name registered once, for every session.

    A call is routed by its session (``current_tool_call().session``) to the
    :class:`ToolSet` whose cell runs there now, so the number of tools the
    server holds does not grow with the number of conversations.
    """

    def __init__(self, client: Toolcell):
        self._client = weakref.ref(client)
        self.lock = threading.Lock()
        self.names: Dict[str, _Name] = {}
        # session -> the tool sets with a cell there, oldest (the one running) first; replaced, never mutated
        self.active: Dict[str, Tuple["ToolSet", ...]] = {}

    def client(self) -> Toolcell:
        c = self._client()
        if c is None:  # pragma: no cover - a tool set holds its client
            raise RuntimeError("toolcell: the client of these tools is gone")
        return c

    def dispatcher(self, name: str) -> Callable[..., Any]:
        active = self.active

        def dispatch(**arguments: Any) -> Any:
            call = _current_call.get()
            session = call.session if call is not None else None
            sets = active.get(session) if session is not None else None
            if not sets:
                raise ToolError(
                    f"{name}: no agent run is using toolcell session {session!r} now; the agent's tools can be "
                    "called only from a cell that its code tool runs"
                )
            fn = sets[0].fns.get(name)
            if fn is None:
                raise ToolError(f"{name} is not one of the tools of the agent running session {session!r}")
            return fn(**arguments)

        dispatch.__name__ = name
        return dispatch

    def add(self, ts: "ToolSet", tools: Sequence[ToolDef]) -> None:
        client = self.client()
        with self.lock:
            fresh: List[ToolDef] = []
            shared: List[str] = []
            shadowed: List[ToolDef] = []
            with client._conn._lock:
                apps = {n for (s, n) in client._conn._tools if s is None}
            for t in tools:
                entry = self.names.get(t.name)
                if entry is not None:
                    (shared.append(t.name) if entry.key == _key(t) else shadowed.append(t))
                elif t.name in apps:  # the app's own tool for every session: shadowed per cell, kept
                    shadowed.append(t)
                else:
                    fresh.append(t)
            if fresh:  # one request: all or none
                client.register_tools([
                    {"name": t.name, "fn": self.dispatcher(t.name), "input_schema": t.input_schema,
                     "description": t.description, "output_schema": t.output_schema}
                    for t in fresh
                ])
                for t in fresh:
                    self.names[t.name] = _Name(_key(t))
            for name in [t.name for t in fresh] + shared:
                self.names[name].owners += 1
            ts.owned = [t.name for t in fresh] + shared
            ts.shadowed = shadowed

    def remove(self, owned: Sequence[str]) -> None:
        """Release `owned` names; a name no tool set holds any more is unregistered."""
        client = self._client()
        with self.lock:
            drop = []
            for name in owned:
                entry = self.names.get(name)
                if entry is None:
                    continue
                entry.owners -= 1
                if entry.owners <= 0:
                    del self.names[name]
                    drop.append(name)
            if drop and client is not None:
                client.unregister(*drop)

    def enter(self, session: str, ts: "ToolSet") -> None:
        with self.lock:
            self.active[session] = self.active.get(session, ()) + (ts,)

    def leave(self, session: str, ts: "ToolSet") -> None:
        with self.lock:
            sets = list(self.active.get(session, ()))
            if ts in sets:
                sets.remove(ts)
            if sets:
                self.active[session] = tuple(sets)
            else:
                self.active.pop(session, None)


_routers: "weakref.WeakKeyDictionary[Toolcell, _Router]" = weakref.WeakKeyDictionary()
_routers_lock = threading.Lock()


def _router_of(client: Toolcell) -> _Router:
    with _routers_lock:
        r = _routers.get(client)
        if r is None:
            r = _routers[client] = _Router(client)
        return r


class ToolSet:
    """An adapter's tools on a client, registered once whatever the number of sessions.

    Each name is registered for every session of the client (one request,
    all or none), and shared with other adapters on the same client that
    have the same definition; a call goes to the tool set whose cell runs
    in the calling session (:meth:`running`). A name that another adapter
    (or the app itself) holds with a different definition is registered for
    the session only while this tool set's cell runs there. :meth:`close`
    releases the names (a name no adapter holds any more is unregistered).

    Raises what ``register_tools`` raises (``RPCError`` when the server
    refuses a tool); adapters turn it into their framework's error.
    """

    def __init__(self, client: Toolcell, tools: Sequence[ToolDef]):
        self.client = client
        self.fns: Dict[str, Callable[..., Any]] = {t.name: t.fn for t in tools}
        self.owned: List[str] = []
        self.shadowed: List[ToolDef] = []
        self._router = _router_of(client)
        self._router.add(self, tools)
        self._closed = False

    @contextlib.contextmanager
    def running(self, session: str) -> Iterator[None]:
        """While a cell of this tool set runs in `session`: its calls come here."""
        router = self._router
        router.enter(session, self)
        try:
            if self.shadowed:
                self.client.register_tools([
                    {"name": t.name, "fn": t.fn, "input_schema": t.input_schema, "description": t.description,
                     "output_schema": t.output_schema} for t in self.shadowed
                ], session=session)
                try:
                    yield
                finally:
                    try:
                        self.client.unregister(*[t.name for t in self.shadowed], session=session)
                    except Exception as e:  # the server is gone: nothing is left registered
                        log.debug("toolcell: unregistering %s's tools failed: %s", session, e)
            else:
                yield
        finally:
            router.leave(session, self)

    def release(self) -> Callable[[], None]:
        """A function that releases this set's names, holding no reference to the set (for finalizers)."""
        router, owned = self._router, list(self.owned)
        return lambda: router.remove(owned)

    def close(self) -> None:
        """Release the names (unregistering those no other adapter holds). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._router.remove(self.owned)


# ---------------------------------------------------------------- dropped adapters


def _in_background(fn: Callable[[], Any], what: str) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except Exception as e:  # the server is gone already: nothing left to end
            log.debug("toolcell: %s: %s", what, e)

    def start() -> None:
        # A finalizer runs wherever the garbage collector does (the client's
        # reader thread, say): requests are sent from a thread of their own.
        try:
            threading.Thread(target=run, name="toolcell-finalize", daemon=True).start()
        except RuntimeError:  # interpreter shutdown: the client's atexit hook closes servers
            pass

    return start


def finalize_adapter(adapter: Any, client: Toolcell, owns_client: bool, tools: Optional[ToolSet]) -> "weakref.finalize":
    """When `adapter` is garbage collected without being closed: close the client it started, else release its tools.

    Returns the finalizer: call it (``fin()``) from the adapter's ``close``
    to run it no more (``fin.detach()``), or let it run there.
    """
    if owns_client:
        fn = _in_background(client.close, "closing the server of a dropped adapter")
    elif tools is not None:
        fn = _in_background(tools.release(), "releasing the tools of a dropped adapter")
    else:
        fn = lambda: None  # noqa: E731
    fin = weakref.finalize(adapter, fn)
    fin.atexit = False  # at exit the client's own hook closes servers
    return fin
