"""What every framework adapter shares: the text a model reads for a cell,
tool results as JSON, the end-of-chunks marker of the adapters that relay
a cell's output from a worker thread, the tools of an adapter registered
once per client (:class:`ToolSet`), and the checks and clean-ups around
them."""

import collections
import concurrent.futures
import contextlib
import json
import logging
import threading
import weakref
from typing import Any, Callable, Deque, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple

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


class _Gate:
    """One session's turn: held by one tool set's cell at a time, handed over in order."""

    __slots__ = ("held", "waiters", "users")

    def __init__(self) -> None:
        self.held = False
        self.waiters: Deque[threading.Event] = collections.deque()
        self.users = 0  # the holder and the waiters: the gate is dropped at 0


class _Router:
    """The adapters' tools on one client: each name registered once, for every session.

    A call is routed by its session (``current_tool_call().session``) to the
    :class:`ToolSet` whose cell runs there now, so the number of tools the
    server holds does not grow with the number of conversations. A tool
    call names its session, not its cell, so the adapters' cells of one
    session take turns here (:meth:`acquire`: one at a time, first come
    first served): the cell the server runs in a session is always the one
    whose tool set is active there. The server runs a session's cells one
    at a time anyway, so taking turns costs no parallelism.
    """

    def __init__(self, client: Toolcell):
        self._client = weakref.ref(client)
        self.lock = threading.Lock()  # the names (held during a registration request)
        self.names: Dict[str, _Name] = {}
        self.gate_lock = threading.Lock()  # the gates, the active tool sets, the shadows (never held for a request)
        self.gates: Dict[str, _Gate] = {}
        # session -> the tool set whose cell runs there now (it holds the session's gate)
        self.active: Dict[str, "ToolSet"] = {}
        # (session, name) registered for a session by a tool set of this router (a shadow), until its cell ends
        self.shadows: Set[Tuple[str, str]] = set()

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
            ts = active.get(session) if session is not None else None
            if ts is None:
                raise ToolError(
                    f"{name}: no agent run is using toolcell session {session!r} now; the agent's tools can be "
                    "called only from a cell that its code tool runs"
                )
            fn = ts.fns.get(name)
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

    # ---- a session's turn

    def acquire(self, session: str) -> _Gate:
        """Wait for `session`'s turn (first come, first served); the gate to :meth:`release`."""
        with self.gate_lock:
            gate = self.gates.get(session)
            if gate is None:
                gate = self.gates[session] = _Gate()
            gate.users += 1
            if not gate.held:
                gate.held = True
                return gate
            turn = threading.Event()
            gate.waiters.append(turn)
        try:
            turn.wait()
        except BaseException:  # Ctrl-C while waiting: leave the queue, or pass on a turn handed over meanwhile
            with self.gate_lock:
                try:
                    gate.waiters.remove(turn)
                except ValueError:
                    pass
                else:
                    gate.users -= 1
                    if gate.users == 0:
                        self.gates.pop(session, None)
                    raise
            self.release(session, gate)
            raise
        return gate  # handed over: still held

    def release(self, session: str, gate: _Gate) -> None:
        with self.gate_lock:
            gate.users -= 1
            if gate.waiters:
                gate.waiters.popleft().set()  # the next one's turn
            else:
                gate.held = False
            if gate.users == 0 and self.gates.get(session) is gate:
                del self.gates[session]

    def enter(self, session: str, ts: "ToolSet") -> None:
        with self.gate_lock:
            self.active[session] = ts

    def leave(self, session: str, ts: "ToolSet") -> None:
        with self.gate_lock:
            if self.active.get(session) is ts:
                del self.active[session]


_routers: "weakref.WeakKeyDictionary[Toolcell, _Router]" = weakref.WeakKeyDictionary()
_routers_lock = threading.Lock()


def _router_of(client: Toolcell) -> _Router:
    with _routers_lock:
        r = _routers.get(client)
        if r is None:
            r = _routers[client] = _Router(client)
        return r


class CellJob:
    """One cell an adapter was asked to run: dropped (none of its code runs) when its caller stops waiting
    before the cell starts, else its own cell, and only it, is interrupted.

    :meth:`ToolSet.running` calls :meth:`start` once the session's turn is this cell's, and
    :meth:`finish` before handing the turn on; :meth:`stop` (from the caller that stopped
    waiting) interrupts while holding the job's lock, so the cell cannot end, and the session's
    next cell cannot start, before the interrupt has gone out.
    """

    def __init__(self) -> None:
        self.state_lock = threading.Lock()
        self.started = False
        self.finished = False
        self.dropped = False

    def start(self) -> None:
        with self.state_lock:
            if self.dropped:  # its caller stopped waiting while it queued: none of its code runs
                raise concurrent.futures.CancelledError()
            self.started = True

    def finish(self) -> None:
        with self.state_lock:
            self.finished = True

    def stop(self, interrupt: Callable[[], Any]) -> None:
        """The caller stopped waiting: drop the job if it has not started, else interrupt its cell."""
        with self.state_lock:
            self.dropped = True
            if self.started and not self.finished:
                interrupt()

    def interrupt(self, interrupt: Callable[[], Any]) -> None:
        """Call `interrupt` if the job's cell is running (never once it has ended: the next may be running)."""
        with self.state_lock:
            if self.started and not self.finished:
                interrupt()


class ToolSet:
    """An adapter's tools on a client, registered once whatever the number of sessions.

    Each name is registered for every session of the client (one request,
    all or none), and shared with other adapters on the same client that
    have the same definition; a call goes to the tool set whose cell runs
    in the calling session (:meth:`running`: the adapters' cells of one
    session take turns). A name that another adapter (or the app itself)
    holds with a different definition is registered for the session only
    while this tool set's cell runs there, unless the app registered a tool
    of that name for that very session (that one is never replaced).
    :meth:`close` releases the names (a name no adapter holds any more is
    unregistered).

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
        self._close_lock = threading.Lock()
        self._closed = False
        self._warned: Set[Tuple[str, str]] = set()

    @contextlib.contextmanager
    def running(self, session: str, job: Optional[CellJob] = None) -> Iterator[None]:
        """While a cell of this tool set runs in `session`: its calls come here.

        Waits for the session's turn: another adapter's cell there (on this
        client) runs first. `job` is started once the turn is this one's
        (a dropped job raises ``CancelledError`` and runs nothing) and
        finished before the turn passes on.
        """
        router = self._router
        gate = router.acquire(session)
        try:
            if job is not None:
                job.start()
            try:
                router.enter(session, self)
                try:
                    mine = self._shadow(session)
                    try:
                        yield
                    finally:
                        self._unshadow(session, mine)
                finally:
                    router.leave(session, self)
            finally:
                if job is not None:
                    job.finish()
        finally:
            router.release(session, gate)

    def schema(self, session: str, format: str = "openai") -> Dict[str, Any]:
        """The server's ``execute_code`` definition for `session`, with this tool set's definitions.

        With names registered for the session only while a cell runs (:attr:`shadowed`), this
        waits for the session's turn; else it asks the server at once.
        """
        if not self.shadowed or reentrant(self.client, session):  # (inside that session's cell, which holds its turn)
            return self.client.schema(format=format, session=session)
        with self.running(session):
            return self.client.schema(format=format, session=session)

    def _shadow(self, session: str) -> List[str]:
        """Register the shadowed names for `session` (the session's turn is this set's); those registered."""
        if not self.shadowed:
            return []
        router = self._router
        conn = self.client._conn
        todo: List[ToolDef] = []
        with router.gate_lock:
            with conn._lock:
                taken = {n for (s, n) in conn._tools if s == session}
            for t in self.shadowed:
                if t.name in taken and (session, t.name) not in router.shadows:
                    # the app's own tool for this session: never replaced (its calls go to it)
                    if (session, t.name) not in self._warned:
                        self._warned.add((session, t.name))
                        log.warning("toolcell: session %r has its own tool %r; this adapter's %r is not offered "
                                    "there, and the cells' calls of it reach the session's own", session,
                                    t.name, t.name)
                    continue
                todo.append(t)
        if not todo:
            return []
        self.client.register_tools([
            {"name": t.name, "fn": t.fn, "input_schema": t.input_schema, "description": t.description,
             "output_schema": t.output_schema} for t in todo
        ], session=session)
        names = [t.name for t in todo]
        with router.gate_lock:
            router.shadows.update((session, n) for n in names)
        return names

    def _unshadow(self, session: str, names: List[str]) -> None:
        if not names:
            return
        try:
            self.client.unregister(*names, session=session)
        except Exception as e:  # the server is gone: nothing is left registered
            log.debug("toolcell: unregistering %s's tools failed: %s", session, e)
        with self._router.gate_lock:
            self._router.shadows.difference_update((session, n) for n in names)

    def release(self) -> Callable[[], None]:
        """A function that releases this set's names, holding no reference to the set (for finalizers)."""
        router, owned = self._router, list(self.owned)
        return lambda: router.remove(owned)

    def close(self) -> None:
        """Release the names (unregistering those no other adapter holds). Safe to call twice, or at once."""
        with self._close_lock:
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
