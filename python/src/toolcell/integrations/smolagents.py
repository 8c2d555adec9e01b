"""toolcell as the code executor of a smolagents ``CodeAgent``.

smolagents' ``CodeAgent`` writes Python and hands it to a *Python executor*
(``LocalPythonExecutor`` by default, or ``E2BExecutor``, ``DockerExecutor``
and friends). :class:`ToolcellExecutor` is one more: every code action runs
as a cell in a real, persistent Python kernel started by ``toolcell serve``,
and the agent's tools stay in *this* process::

    from smolagents import CodeAgent, tool
    from toolcell.integrations.smolagents import ToolcellExecutor

    @tool
    def get_order(id: str) -> dict:
        \"\"\"Look an order up.

        Args:
            id: The order id, like "A-1".
        \"\"\"
        return {"id": id, "total": 12.5}

    with CodeAgent(tools=[get_order], model=model, executor=ToolcellExecutor()) as agent:
        agent.run("What do orders A-1 and A-2 cost together?")

What the executor does with the agent's tools (``send_tools``): each one is
registered as a toolcell *client tool* from its ``inputs`` (converted to a
JSON Schema), its description and its ``output_type``/``output_schema``. In
the kernel it is a plain function of the same name; a call crosses to this
process, where the tool's ``forward`` runs with its live state (an MCP
session opened by ``ToolCollection.from_mcp``, a database connection, a
managed agent), and its result goes back as JSON. Remote executors (E2B,
Docker, Modal) cannot do that: they ship each tool's *source code* into the
sandbox, so a tool that holds a connection, such as an MCP tool, does not
work there.

``final_answer(...)`` in a cell hands its argument to the agent's
``final_answer`` tool here, ends the cell at once (it raises an exception
derived from ``BaseException``, so ``except Exception`` in the model's code
does not swallow it) and ends the step with ``is_final_answer=True``. The
answer crosses as JSON extended with tuples, sets, bytes, dates, ``Decimal``,
``Path``, numpy arrays and PIL images; anything else comes back as its
``repr()`` unless ``allow_pickle=True``.

Errors: a cell that fails (an exception, a timeout, a refused cell, a
failing tool's ``ToolError``) raises :class:`smolagents.local_python_executor.InterpreterError`
carrying :func:`toolcell.integrations.result_text` (the output, the
traceback and toolcell's ``error``/``hint`` lines). ``CodeAgent`` turns it
into an ``AgentExecutionError`` that the model reads in its next messages,
and the run goes on.

State: one toolcell session (one kernel) per executor. Variables survive
from step to step and across ``agent.run(..., reset=False)`` (and
``reset=True``: like the local executor, a new run only resets the agent's
memory). A kernel replaced between steps (killed, evicted, reaped) is
noticed by the step that runs in the new one (the executor asks the server
nothing between steps), which tells the model and defines ``final_answer``
and the agent's variables again. ``cleanup()`` (called by ``agent.cleanup()``
and at the end of ``with CodeAgent(...)``) ends the session, and the server
if the executor started it; an executor dropped without it does the same
when garbage collected.
"""

import json
import logging
import re
import uuid
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

try:
    from smolagents.agent_types import AgentType
    from smolagents.default_tools import FinalAnswerTool
    from smolagents.local_python_executor import CodeOutput, InterpreterError, PythonExecutor
except ImportError as e:  # pragma: no cover - depends on the environment
    try:
        from importlib.metadata import version as _version

        _found = f" (found smolagents {_version('smolagents')})"
    except Exception:
        _found = ""
    raise ImportError(
        f"toolcell.integrations.smolagents needs smolagents 1.23 or later{_found}: "
        'pip install "toolcell[smolagents]"'
    ) from e

from .._client import Chunk, Config, PathLike, Toolcell
from .._errors import RPCError, ToolcellError, ToolError
from .._result import ExecuteResult
from ._common import _in_background, result_text

__all__ = ["ToolcellExecutor"]

log = logging.getLogger("toolcell")

#: The client tool the kernel's ``final_answer`` sends the answer through.
_CHANNEL = "_smolagents_final_answer"

# A JSON codec extended with type markers (the format of smolagents'
# SafeSerializer), written once and run on both sides: this process sends
# the agent's variables with it, the kernel sends the final answer back. It
# is plain source because the kernel's interpreter need not have smolagents
# (nor this package) installed.
_CODEC_SOURCE = r'''
import base64 as _tc_b64
import json as _tc_json


def _tc_to_safe(obj):
    t = type(obj)
    if obj is None or t is bool or t is int or t is float or t is str:
        return obj
    if t is list:
        return [_tc_to_safe(x) for x in obj]
    if t is dict:
        if "__type__" not in obj and all(type(k) is str for k in obj):
            return {k: _tc_to_safe(v) for k, v in obj.items()}
        return {"__type__": "dict_with_complex_keys",
                "data": [[_tc_to_safe(k), _tc_to_safe(v)] for k, v in obj.items()]}
    if t is tuple:
        return {"__type__": "tuple", "data": [_tc_to_safe(x) for x in obj]}
    if t is set or t is frozenset:
        return {"__type__": t.__name__, "data": [_tc_to_safe(x) for x in obj]}
    if t is bytes:
        return {"__type__": "bytes", "data": _tc_b64.b64encode(obj).decode("ascii")}
    if t is complex:
        return {"__type__": "complex", "real": obj.real, "imag": obj.imag}
    module = getattr(t, "__module__", "") or ""
    name = t.__name__
    if module == "datetime" and name in ("datetime", "date", "time"):
        return {"__type__": name, "data": obj.isoformat()}
    if module == "datetime" and name == "timedelta":
        return {"__type__": "timedelta", "total_seconds": obj.total_seconds()}
    if module == "decimal" and name == "Decimal":
        return {"__type__": "Decimal", "data": str(obj)}
    if module.startswith("pathlib") and "Path" in name:
        return {"__type__": "Path", "data": str(obj)}
    if module == "numpy" or module.startswith("numpy."):
        if name == "ndarray" and obj.dtype.kind in "biufc":
            return {"__type__": "ndarray", "data": _tc_to_safe(obj.tolist()), "dtype": str(obj.dtype)}
        if name != "ndarray" and hasattr(obj, "item") and getattr(obj, "shape", None) == ():
            return _tc_to_safe(obj.item())
    if module.startswith("PIL.") and hasattr(obj, "save") and hasattr(obj, "mode"):
        import io
        buffer = io.BytesIO()
        obj.save(buffer, format="PNG")
        return {"__type__": "PIL.Image", "data": _tc_b64.b64encode(buffer.getvalue()).decode("ascii")}
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    raise TypeError("a %s.%s cannot be sent as JSON" % (module, name))


def _tc_from_safe(obj):
    if isinstance(obj, list):
        return [_tc_from_safe(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    kind = obj.get("__type__")
    if kind is None:
        return {k: _tc_from_safe(v) for k, v in obj.items()}
    if kind == "dict_with_complex_keys":
        return {_tc_from_safe(k): _tc_from_safe(v) for k, v in obj["data"]}
    if kind == "tuple":
        return tuple(_tc_from_safe(x) for x in obj["data"])
    if kind == "set":
        return set(_tc_from_safe(x) for x in obj["data"])
    if kind == "frozenset":
        return frozenset(_tc_from_safe(x) for x in obj["data"])
    if kind == "bytes":
        return _tc_b64.b64decode(obj["data"])
    if kind == "complex":
        return complex(obj["real"], obj["imag"])
    if kind in ("datetime", "date", "time"):
        import datetime
        return getattr(datetime, kind).fromisoformat(obj["data"])
    if kind == "timedelta":
        import datetime
        return datetime.timedelta(seconds=obj["total_seconds"])
    if kind == "Decimal":
        import decimal
        return decimal.Decimal(obj["data"])
    if kind == "Path":
        import pathlib
        return pathlib.Path(obj["data"])
    if kind == "ndarray":
        data = _tc_from_safe(obj["data"])
        try:
            import numpy
        except ImportError:
            return data
        return numpy.array(data, dtype=obj["dtype"])
    if kind == "PIL.Image":
        raw = _tc_b64.b64decode(obj["data"])
        try:
            import io
            import PIL.Image
        except ImportError:
            return raw
        image = PIL.Image.open(io.BytesIO(raw))
        image.load()
        return image
    return {k: _tc_from_safe(v) for k, v in obj.items()}


def _tc_dumps(obj, allow_pickle):
    """obj as "json:<JSON>" or, failing that and when allowed, "pickle:<base64>"."""
    try:
        return "json:" + _tc_json.dumps(_tc_to_safe(obj))
    except (TypeError, ValueError, RecursionError) as e:
        if not allow_pickle:
            raise TypeError(str(e)) from None
    import pickle
    return "pickle:" + _tc_b64.b64encode(pickle.dumps(obj)).decode("ascii")


def _tc_loads(data, allow_pickle):
    if data.startswith("json:"):
        return _tc_from_safe(_tc_json.loads(data[5:]))
    if data.startswith("pickle:"):
        if not allow_pickle:
            raise ValueError("refused pickled data: allow_pickle is off")
        import pickle
        return pickle.loads(_tc_b64.b64decode(data[7:]))
    raise ValueError("unknown encoding %r" % (data[:10],))
'''

_codec: Dict[str, Any] = {}
exec(compile(_CODEC_SOURCE, "<toolcell smolagents codec>", "exec"), _codec)
_dumps: Callable[[Any, bool], str] = _codec["_tc_dumps"]
_loads: Callable[[str, bool], Any] = _codec["_tc_loads"]

# Run in the kernel before the first step (and again after the kernel was
# replaced): defines `final_answer`, which sends the answer to this process
# and stops the cell with an exception `except Exception` cannot catch.
_SETUP_TEMPLATE = r'''
def __toolcell_smolagents_setup(codec_source, allow_pickle):
    import toolcell_tools
    codec = {}
    exec(compile(codec_source, "<toolcell smolagents codec>", "exec"), codec)
    dumps = codec["_tc_dumps"]

    class FinalAnswerException(BaseException):
        """final_answer() raises it to end the step once the agent has the answer."""

    def final_answer(*args, **kwargs):
        """Provides a final answer to the given problem: hands it to the agent and ends this step."""
        payload = [list(args), kwargs]
        data = text = None
        try:
            data = dumps(payload, False)
        except TypeError:
            text = repr(args[0]) if len(args) == 1 and not kwargs else repr(payload)
            if allow_pickle:
                try:
                    data = dumps(payload, True)
                except Exception:
                    data = None
        getattr(toolcell_tools, %(channel)r)(data=data, text=text)
        raise FinalAnswerException("the final answer was handed to the agent")

    globals()["final_answer"] = final_answer


__toolcell_smolagents_setup(%(codec)r, %(allow_pickle)r)
del __toolcell_smolagents_setup
'''

_VARIABLES_TEMPLATE = r'''
def __toolcell_smolagents_variables(codec_source, payloads):
    codec = {}
    exec(compile(codec_source, "<toolcell smolagents codec>", "exec"), codec)
    values = {}
    for name, data in payloads.items():
        try:
            values[name] = codec["_tc_loads"](data, True)
        except Exception as e:
            raise ValueError("the agent variable %%r could not be loaded in the kernel: %%s: %%s"
                             %% (name, type(e).__name__, e)) from None
    globals().update(values)


__toolcell_smolagents_variables(%(codec)r, %(payloads)r)
del __toolcell_smolagents_variables
'''

# An assignment or definition that rebinds `final_answer` in the kernel.
_REBINDS_FINAL_ANSWER = re.compile(
    r"(?<![.\w])final_answer\s*(=(?!=)|:)|\b(def|class|del|as|for|global)\s+final_answer\b|\bimport\b.*\bfinal_answer\b"
)

_JSON_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")


def _input_schema(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """One smolagents input (``{"type": ..., "description": ..., "nullable": ...}``) as JSON Schema.

    smolagents' own types ``any``, ``image`` and ``audio`` accept any JSON
    value (an image or a sound can only cross as a path or URL string).
    """
    out = {k: v for k, v in spec.items() if k not in ("type", "nullable")}
    raw = spec.get("type", "any")
    types: List[str] = list(raw) if isinstance(raw, (list, tuple)) else [str(raw)]
    if all(t in _JSON_TYPES for t in types):
        if spec.get("nullable") and "null" not in types:
            types.append("null")
        out["type"] = types[0] if len(types) == 1 else types
    return out


def _tool_input_schema(name: str, inputs: Mapping[str, Any]) -> Dict[str, Any]:
    if not isinstance(inputs, Mapping):
        raise TypeError(f"smolagents tool {name!r}: `inputs` must be a dict of input specs, got {inputs!r}")
    properties: Dict[str, Any] = {}
    required: List[str] = []
    for arg, spec in inputs.items():
        if not isinstance(spec, Mapping):
            raise TypeError(f"smolagents tool {name!r}: input {arg!r} must be a dict like "
                            f'{{"type": "string", "description": "..."}}, got {spec!r}')
        properties[arg] = _input_schema(spec)
        if not spec.get("nullable"):
            required.append(arg)
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _tool_output_schema(tool: Any) -> Optional[Dict[str, Any]]:
    schema = getattr(tool, "output_schema", None)
    if isinstance(schema, Mapping):
        return dict(schema)
    output_type = getattr(tool, "output_type", None)
    if output_type in _JSON_TYPES:
        return {"type": output_type}
    return None


def _jsonable(value: Any) -> Any:
    """A tool's return value as the kernel gets it (JSON).

    smolagents' agent types become their string form (``AgentImage`` and
    ``AgentAudio`` the path of a file holding them), a PIL image is saved to
    a file whose path is returned, numpy values become lists and numbers,
    pydantic models dicts, dates ISO strings; anything else not JSON its
    ``str()``.
    """
    if isinstance(value, AgentType):
        return value.to_string()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    module = type(value).__module__ or ""
    if module.startswith("PIL."):
        from smolagents.agent_types import AgentImage

        return AgentImage(value).to_string()
    if module.startswith("numpy") and hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return _jsonable(value.model_dump(mode="json"))
    if hasattr(value, "isoformat") and callable(value.isoformat):
        return value.isoformat()
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def _strip_final_traceback(output: str) -> str:
    """A final-answer cell's output without the traceback of the exception that ended it."""
    marker = "\n--- stderr ---\n"
    stdout, sep, stderr = output.partition(marker)
    if not sep:
        return output
    cut = stderr.rfind("Traceback (most recent call last):")
    if cut >= 0 and "FinalAnswerException" in stderr[cut:]:
        stderr = stderr[:cut]
    if not stderr.strip():
        return stdout
    return stdout + marker + stderr


def _with_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


class ToolcellExecutor(PythonExecutor):  # type: ignore[misc]  # smolagents ships no type information
    """A smolagents ``PythonExecutor`` that runs code actions in a toolcell kernel.

    Pass it to ``CodeAgent(executor=...)``. ``CodeAgent`` then calls
    ``send_variables`` and ``send_tools`` at the start of each run, calls the
    executor with each code action, and ``cleanup`` from ``agent.cleanup()``.

    Args:
        toolcell: A running :class:`toolcell.Toolcell` to use. Without it the
            executor starts its own ``toolcell serve`` (with ``config`` and
            ``cwd``) and ends it in :meth:`cleanup`.
        session: The toolcell session (one kernel) the agent's code runs in;
            default: a fresh ``smolagents-<hex>`` name. Give one to share a
            kernel on purpose.
        config: Configuration of the server the executor starts (a
            ``toolcell.toml`` path or a dict of sections). In a dict, a
            missing ``[tools] enabled`` is set to ``[]``: cells then see only
            the agent's tools, not toolcell's built-in ones (the model is
            only told about the agent's). Raise the tool-call budget of a
            cell (default 50) with ``{"execution": {"max_tool_calls": 500}}``.
        cwd: The started server's working directory (the kernels').
        timeout: Seconds one code action may run (default: the server's,
            300). A cell past it is interrupted and the model is told.
        stream: Called with each :class:`toolcell.Chunk` of output while a
            cell runs (on the client's reader thread: keep it quick).
            smolagents shows a step's execution logs only once the step is
            done; use this to watch them live.
        allow_pickle: Let a final answer that plain JSON cannot carry (a
            DataFrame, an instance of your own class) come back pickled and
            unpickle it here. Off by default: such an answer comes back as
            its ``repr()`` string, and a warning is logged. Unpickling runs
            code chosen by the kernel, so turn it on only for kernels you
            trust as much as this process.
    """

    def __init__(
        self,
        toolcell: Optional[Toolcell] = None,
        *,
        session: Optional[str] = None,
        config: Config = None,
        cwd: Optional[PathLike] = None,
        timeout: Optional[float] = None,
        stream: Optional[Callable[[Chunk], Any]] = None,
        allow_pickle: bool = False,
    ) -> None:
        if toolcell is not None and (config is not None or cwd is not None):
            raise TypeError(
                "ToolcellExecutor: config= and cwd= configure the server the executor starts; "
                "with toolcell= pass them to Toolcell(...) instead"
            )
        if toolcell is None:
            if config is None or isinstance(config, Mapping):
                merged: Dict[str, Any] = {k: dict(v) if isinstance(v, Mapping) else v
                                          for k, v in (config or {}).items()}
                tools_section = merged.setdefault("tools", {})
                if isinstance(tools_section, dict):
                    tools_section.setdefault("enabled", [])
                toolcell = Toolcell(config=merged, cwd=cwd)
            else:
                toolcell = Toolcell(config=config, cwd=cwd)
            self._owns_toolcell = True
        else:
            self._owns_toolcell = False
        self.toolcell: Toolcell = toolcell
        self.session: str = session or f"smolagents-{uuid.uuid4().hex[:12]}"
        self.timeout = timeout
        self.stream = stream
        self.allow_pickle = allow_pickle
        #: The result of the last code action (tool calls made, kernel, files, ...).
        self.last_result: Optional[ExecuteResult] = None
        self._final_tool: Any = FinalAnswerTool()
        self._registered: Dict[str, Any] = {}  # name -> the smolagents tool registered under it
        self._channel_registered = False
        self._variables: Dict[str, str] = {}  # name -> encoded value, sent again to a new kernel
        self._kernel_id: Optional[str] = None  # the kernel that has final_answer and the variables
        self._rebound = False  # a cell rebound final_answer in that kernel
        self._final: Optional[Tuple[Any]] = None
        self._closed = False
        # the names registered for the session, shared with the finalizer (which must not hold the executor)
        self._names: Set[str] = set()
        # dropped without cleanup(): end the server it started, else its session's tools and kernel
        tc, session, names = self.toolcell, self.session, self._names

        def release() -> None:
            if names:
                tc.unregister(*sorted(names), session=session)
            tc.shutdown_session(session)

        self._finalizer = weakref.finalize(
            self, _in_background(tc.close if self._owns_toolcell else release, "ending a dropped executor"))
        self._finalizer.atexit = False

    # ---- the PythonExecutor interface

    def send_tools(self, tools: Mapping[str, Any]) -> None:
        """Register the agent's tools (and managed agents) as client tools of the session.

        ``final_answer`` is special: the kernel defines its own, which hands
        the answer to the agent's ``final_answer`` tool here and ends the
        cell. Called at the start of every run; tools already registered are
        kept, tools gone from the agent are unregistered.
        """
        self._check_open()
        wanted = dict(tools)
        final = wanted.pop("final_answer", None)
        if final is not None and final is not self._final_tool:
            self._final_tool = final
            if self._channel_registered:
                self._register_plain_final_answer()
        stale = [name for name in self._registered if name not in wanted]
        if stale:
            self.toolcell.unregister(*stale, session=self.session)
            for name in stale:
                del self._registered[name]
                self._names.discard(name)
        for name, tool in wanted.items():
            if self._registered.get(name) is not tool:
                self._register(name, tool)
        self._ensure_ready()

    def send_variables(self, variables: Mapping[str, Any]) -> None:
        """Define ``variables`` (the agent's state, ``additional_args``) in the kernel.

        Values cross as JSON extended with tuples, sets, bytes, dates,
        numpy arrays and PIL images; anything else is pickled (the kernel's
        interpreter must be able to import its class). A value that cannot
        be sent raises ``ValueError`` naming the variable.
        """
        self._check_open()
        if not variables:
            return
        payloads: Dict[str, str] = {}
        for name, value in variables.items():
            try:
                payloads[str(name)] = _dumps(value, True)
            except Exception as e:
                raise ValueError(
                    f"cannot send the agent variable {name!r} ({type(value).__name__}) to the toolcell kernel: "
                    f"it is neither JSON nor picklable ({type(e).__name__}: {e}); pass a plain value instead"
                ) from e
        self._ensure_ready()
        prepared = self._kernel_id
        result = self._run_internal(_VARIABLES_TEMPLATE % {"codec": _CODEC_SOURCE, "payloads": payloads})
        if not result.ok:
            raise ValueError(f"sending the agent's variables to the toolcell kernel failed:\n{result_text(result)}")
        self._variables.update(payloads)
        if prepared is not None and result.kernel.id and result.kernel.id != prepared:
            # the kernel was replaced since the last step: prepare the new one (all the variables, final_answer)
            log.warning("toolcell: the kernel of %s was replaced since the last step%s; its variables are gone",
                        self.session, f" ({result.warning})" if result.warning else "")
            self._kernel_id = None
            self._ensure_ready()

    def __call__(self, code_action: str) -> CodeOutput:
        """Run one code action as a cell; how smolagents' ``CodeAgent`` runs each step.

        Returns ``CodeOutput(output, logs, is_final_answer)``: ``logs`` is the
        text the model reads (the cell's output and toolcell's notes),
        ``output`` the final answer when the cell called ``final_answer``,
        else ``None`` (the value of a trailing expression is printed into
        the logs). A failed cell raises ``InterpreterError`` with the text
        the model should read.
        """
        self._check_open()
        if not code_action.strip():
            return CodeOutput(output=None, logs="", is_final_answer=False)
        notice = self._ensure_ready()
        prepared = self._kernel_id
        self._final = None
        try:
            result = self.toolcell.execute(code_action, session=self.session, timeout=self.timeout,
                                           stream=self.stream)
        finally:
            final, self._final = self._final, None
        self.last_result = result
        self._after_cell(result, code_action)
        if final is not None:
            logs = _with_newline(_strip_final_traceback(result.output or ""))
            if result.warning:
                logs += f"warning: {result.warning}\n"
            return CodeOutput(output=final[0], logs=notice + logs, is_final_answer=True)
        if prepared is not None and result.kernel.id and result.kernel.id != prepared and not result.kernel.ended:
            # The kernel was replaced between steps (killed, evicted, reaped): this step ran in
            # a new one. Prepare it now, for the next step, and tell the model.
            notice += self._prepare_replaced(result)
        text = result_text(result)
        if not result.ok:
            raise InterpreterError(notice + text)
        logs = "" if text == "(no output)" else _with_newline(text)
        return CodeOutput(output=None, logs=notice + logs, is_final_answer=False)

    def cleanup(self) -> None:
        """End the session (its kernel and variables) and the server if this executor started it.

        Called by ``agent.cleanup()`` and at the end of ``with CodeAgent(...)``.
        Safe to call twice; the executor cannot run code afterwards.
        """
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        try:
            names = list(self._registered) + (["final_answer", _CHANNEL] if self._channel_registered else [])
            if names:
                self.toolcell.unregister(*names, session=self.session)
            self.toolcell.shutdown_session(self.session)
        except ToolcellError as e:
            log.warning("toolcell: ending session %s failed: %s", self.session, e)
        finally:
            self._registered.clear()
            if self._owns_toolcell:
                self.toolcell.close()

    def __enter__(self) -> "ToolcellExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        return f"<ToolcellExecutor session={self.session!r}{' closed' if self._closed else ''}>"

    # ---- internals

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                f"this ToolcellExecutor (session {self.session!r}) was cleaned up; "
                "create a new one (and a new CodeAgent) to run more code"
            )

    def _register(self, name: str, tool: Any) -> None:
        description = str(getattr(tool, "description", "") or "")
        output_type = getattr(tool, "output_type", None)
        if output_type and output_type != "any":
            description += f"\nReturns: {output_type}."
        input_schema = _tool_input_schema(name, getattr(tool, "inputs", {}) or {})

        def call(**arguments: Any) -> Any:
            return _jsonable(tool(**arguments))

        try:
            self.toolcell.register_tool(name, call, input_schema, description=description,
                                        output_schema=_tool_output_schema(tool), session=self.session)
        except RPCError as e:
            raise ValueError(
                f"toolcell refused the smolagents tool {name!r}: {e.message}. Rename the tool, or, if it "
                "clashes with a built-in toolcell tool, start toolcell with config={'tools': {'enabled': []}}"
            ) from e
        self._registered[name] = tool
        self._names.add(name)

    def _register_plain_final_answer(self) -> None:
        """``final_answer`` as a plain client tool too, for a kernel that lacks the setup.

        The setup cell's ``final_answer`` shadows it. Only in a kernel that
        was replaced right before a cell (killed between steps, say) does a
        cell reach this one: the answer (JSON) still ends the step, but the
        rest of that cell runs.
        """
        tool = self._final_tool
        me = weakref.ref(self)  # the client holds its tools: they must not keep the executor alive

        def plain_final_answer(**arguments: Any) -> None:
            executor = me()
            if executor is None:
                raise ToolError("this smolagents executor is gone")
            executor._final = (tool(**arguments),)

        self.toolcell.register_tool(
            "final_answer", plain_final_answer,
            _tool_input_schema("final_answer", getattr(tool, "inputs", None) or {"answer": {"type": "any"}}),
            description=str(getattr(tool, "description", "") or ""), session=self.session,
        )
        self._names.add("final_answer")

    def _final_answer_channel(self, data: Optional[str] = None, text: Optional[str] = None) -> None:
        """The kernel's ``final_answer`` calls this with the encoded arguments."""
        args: List[Any]
        kwargs: Dict[str, Any]
        if data is not None:
            try:
                args, kwargs = _loads(data, self.allow_pickle)
            except Exception as e:
                if text is None:
                    raise
                log.warning("toolcell: the final answer could not be unpickled here (%s: %s); "
                            "the agent gets its repr() instead", type(e).__name__, e)
                args, kwargs = [text], {}
        else:
            log.warning("toolcell: the final answer is not JSON (nor tuples, sets, dates, numpy arrays, PIL "
                        "images); the agent gets its repr(). Pass allow_pickle=True to get the object itself.")
            args, kwargs = [text], {}
        self._final = (self._final_tool(*args, **kwargs),)

    def _ensure_ready(self) -> str:
        """Make sure the session's kernel has ``final_answer`` and the agent's variables.

        Runs the setup cell on the first use, after a cell whose kernel
        ended or was replaced, and after a cell rebound ``final_answer``.
        It asks the server nothing: whether the kernel is the prepared one
        comes from the last cell's result (a kernel lost between steps is
        noticed by the step that runs in its replacement, see
        :meth:`_prepare_replaced`). Returns a note for the model, or ``""``.
        """
        if not self._channel_registered:
            # Before the setup cell defines the kernel's own `final_answer`:
            # registering the plain tool after it would replace it.
            self._register_plain_final_answer()
            me = weakref.ref(self)

            def channel(data: Optional[str] = None, text: Optional[str] = None) -> None:
                executor = me()
                if executor is None:
                    raise ToolError("this smolagents executor is gone")
                executor._final_answer_channel(data, text)

            self.toolcell.register_tool(
                _CHANNEL, channel,
                {"type": "object", "properties": {"data": {"type": ["string", "null"]},
                                                  "text": {"type": ["string", "null"]}},
                 "required": [], "additionalProperties": False},
                description="Internal: hands the final answer of a smolagents step to the agent.",
                session=self.session,
            )
            self._names.add(_CHANNEL)
            self._channel_registered = True
        kept = self._kernel_id is not None
        if kept and not self._rebound:
            return ""
        code = _SETUP_TEMPLATE % {"channel": _CHANNEL, "codec": _CODEC_SOURCE, "allow_pickle": self.allow_pickle}
        if self._variables and not kept:
            code += _VARIABLES_TEMPLATE % {"codec": _CODEC_SOURCE, "payloads": self._variables}
        result = self._run_internal(code)
        if not result.ok:
            raise RuntimeError(f"preparing the toolcell kernel for smolagents failed:\n{result_text(result)}")
        self._kernel_id = result.kernel.id or None
        self._rebound = False
        return ""

    def _prepare_replaced(self, result: ExecuteResult) -> str:
        """The step's cell ran in a new kernel: prepare that one now; the note for the model."""
        self._kernel_id = None
        try:
            self._ensure_ready()
        except RuntimeError as e:
            log.warning("toolcell: %s", e)
        why = f" ({result.warning})" if result.warning else ""
        return (f"[toolcell: this step ran in a new kernel{why}; variables defined by earlier steps are gone; "
                "final_answer and the agent's own variables are defined again for the next step]\n")

    def _run_internal(self, code: str) -> ExecuteResult:
        return self.toolcell.execute(code, session=self.session, timeout=self.timeout)

    def _after_cell(self, result: ExecuteResult, code: str) -> None:
        """Forget the prepared kernel when it is gone; note when ``final_answer`` was rebound."""
        kernel = result.kernel
        if (kernel.id and kernel.id != self._kernel_id) or kernel.ended or kernel.state_kept is False:
            self._kernel_id = None
        elif _REBINDS_FINAL_ANSWER.search(code):
            self._rebound = True
