"""JSON Schema of a Python function, from its signature, type hints and docstring.

Type hints map as the cell sees them back: `str` string, `int` integer,
`float` number, `bool` boolean, `list`/`List[X]`/`Sequence[X]`/`tuple` array,
`dict`/`Dict[str, X]` object, `Optional[X]` a union with null, `Literal[...]`
and `enum.Enum` an enum, `TypedDict` and dataclasses objects with their
fields, `Any` or no hint anything. A parameter's default becomes its
schema `default` and makes it optional. Descriptions come from the docstring:
its text before the first section is the tool's description; the
`Args:` section (Google style; `:param x:` lines are read too) gives each
parameter's. The return type hint, when there is one, is the output schema.
"""

import collections.abc
import dataclasses
import enum
import inspect
import json
import re
import types
import typing
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Literal,
    Optional,
    Tuple,
    get_args,
    get_origin,
)

# 3.10+: the type of `X | Y` (None on 3.9)
_UnionType: Any = getattr(types, "UnionType", None)

_MAX_DEPTH = 12
_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Returns|Return|Yields|"
    r"Raises|Examples?|Notes?|Attributes|See Also|Warnings?|Todo)\s*:\s*$",
    re.IGNORECASE,
)
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")


def _json_value(value: Any) -> Tuple[bool, Any]:
    """(True, value) when `value` is JSON (so it can be a schema default)."""
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False, None
    return True, value


def _type_hints(obj: Any) -> Dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except TypeError:
        # Python 3.8 has no include_extras (Annotated hints then lose their descriptions);
        # also a TypeError of an unresolvable annotation, which the retry meets again
        try:
            return typing.get_type_hints(obj)
        except Exception:
            return dict(getattr(obj, "__annotations__", {}) or {})
    except Exception:  # unresolvable forward references: fall back to raw annotations
        return dict(getattr(obj, "__annotations__", {}) or {})


def type_schema(tp: Any, _depth: int = 0) -> Dict[str, Any]:
    """The JSON Schema of values of the Python type `tp`."""
    if _depth > _MAX_DEPTH:
        return {}
    if tp is inspect.Parameter.empty or tp is Any or tp is object:
        return {}
    if tp is None or tp is type(None):
        return {"type": "null"}
    if isinstance(tp, str):  # an unresolved forward reference
        return {}
    origin = get_origin(tp)
    args = get_args(tp)
    # Annotated[X, "description", ...]
    if origin is not None and getattr(tp, "__metadata__", None) is not None:
        described = dict(type_schema(args[0], _depth + 1))
        for meta in tp.__metadata__:
            if isinstance(meta, str):
                described["description"] = meta
        return described
    if origin is typing.Union or (_UnionType is not None and isinstance(tp, _UnionType)):
        non_null = [a for a in args if a is not type(None)]
        has_null = len(non_null) != len(args)
        alts = [type_schema(a, _depth + 1) for a in non_null]
        if any(a == {} for a in alts):
            return {}
        if has_null:
            alts.append({"type": "null"})
        if len(alts) == 1:
            return alts[0]
        simple = [a.get("type") for a in alts]
        if all(isinstance(t, str) and len(a) == 1 for t, a in zip(simple, alts)):
            return {"type": simple}
        return {"anyOf": alts}
    schema: Dict[str, Any]
    if origin is Literal:
        values = [a.value if isinstance(a, enum.Enum) else a for a in args]
        schema = {"enum": values}
        kinds = {_scalar_type(v) for v in values}
        if len(kinds) == 1 and None not in kinds:
            schema = {"type": kinds.pop(), "enum": values}
        return schema
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        kinds = {_scalar_type(v) for v in values}
        schema = {"enum": values}
        if len(kinds) == 1 and None not in kinds:
            schema = {"type": kinds.pop(), "enum": values}
        return schema
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if tp is bytes:
        return {"type": "string"}
    if _is_typeddict(tp):
        return _typeddict_schema(tp, _depth)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_schema(tp, _depth)
    container = origin or tp
    if container in (list, set, frozenset, collections.abc.Sequence, collections.abc.MutableSequence,
                     collections.abc.Set, collections.abc.Iterable, collections.abc.Collection):
        schema = {"type": "array"}
        if args:
            schema["items"] = type_schema(args[0], _depth + 1)
        if container in (set, frozenset, collections.abc.Set):
            schema["uniqueItems"] = True
        return schema
    if container is tuple:
        schema = {"type": "array"}
        if len(args) == 2 and args[1] is Ellipsis:
            schema["items"] = type_schema(args[0], _depth + 1)
        elif args and args != ((),):
            schema["prefixItems"] = [type_schema(a, _depth + 1) for a in args]
            schema["minItems"] = schema["maxItems"] = len(args)
        return schema
    if container in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        schema = {"type": "object"}
        if len(args) == 2 and type_schema(args[1], _depth + 1) != {}:
            schema["additionalProperties"] = type_schema(args[1], _depth + 1)
        return schema
    return {}


def _scalar_type(v: Any) -> Optional[str]:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return None


def _typeddict_schema(tp: Any, depth: int) -> Dict[str, Any]:
    hints = _type_hints(tp)
    required_keys = getattr(tp, "__required_keys__", None)
    if required_keys is None:
        required_keys = set(hints) if getattr(tp, "__total__", True) else set()
    props = {}
    for name, hint in hints.items():
        hint_origin = get_origin(hint)
        # typing.Required / NotRequired wrappers (3.11+) hold the real type
        if hint_origin is not None and getattr(hint_origin, "_name", "") in ("Required", "NotRequired"):
            hint = get_args(hint)[0]
        props[name] = type_schema(hint, depth + 1)
    _, arg_docs = parse_docstring(tp.__doc__)
    for name, doc in arg_docs.items():
        if name in props:
            props[name] = dict(props[name], description=doc)
    schema: Dict[str, Any] = {"type": "object", "properties": props}
    required = [n for n in hints if n in required_keys]
    if required:
        schema["required"] = required
    return schema


def _dataclass_schema(tp: Any, depth: int) -> Dict[str, Any]:
    hints = _type_hints(tp)
    props: Dict[str, Any] = {}
    required: List[str] = []
    _, arg_docs = parse_docstring(tp.__doc__ if tp.__doc__ and not tp.__doc__.startswith(tp.__name__ + "(") else None)
    for f in dataclasses.fields(tp):
        if not f.init:
            continue
        prop = dict(type_schema(hints.get(f.name, f.type), depth + 1))
        if f.default is not dataclasses.MISSING:
            ok, value = _json_value(f.default)
            if ok:
                prop["default"] = value
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            pass
        else:
            required.append(f.name)
        if f.name in arg_docs:
            prop["description"] = arg_docs[f.name]
        props[f.name] = prop
    schema: Dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


def parse_docstring(doc: Optional[str]) -> Tuple[str, Dict[str, str]]:
    """(description, {parameter: description}) of a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: List[str] = []
    params: Dict[str, str] = {}
    section: Optional[str] = None
    current: Optional[str] = None
    base_indent = 0
    for line in lines:
        stripped = line.strip()
        m = _SECTION.match(stripped) if not line.startswith((" ", "\t")) else None
        if m:
            section = m.group(1).lower()
            current = None
            continue
        sphinx = _SPHINX_PARAM.match(stripped)
        if sphinx:
            current = sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            section = "sphinx"
            continue
        if section is None:
            summary.append(line)
            continue
        if section in ("args", "arguments", "parameters", "params", "keyword args", "keyword arguments"):
            if not stripped:
                continue
            indent = len(line) - len(line.lstrip())
            arg = _ARG_LINE.match(stripped)
            if arg and (current is None or indent <= base_indent):
                current = arg.group(1)
                base_indent = indent
                params[current] = arg.group(2).strip()
            elif current is not None:
                params[current] = (params[current] + " " + stripped).strip()
        elif section == "sphinx":
            if stripped.startswith(":"):
                section = "other"
                current = None
            elif stripped and current is not None:
                params[current] = (params[current] + " " + stripped).strip()
    description = "\n".join(summary).strip()
    return description, params


def function_schema(fn: Callable[..., Any]) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]], str]:
    """(input_schema, output_schema or None, description) of the function `fn`."""
    sig = inspect.signature(fn)
    hints = _type_hints(fn)
    description, arg_docs = parse_docstring(inspect.getdoc(fn))
    props: Dict[str, Any] = {}
    required: List[str] = []
    additional = False
    for name, param in sig.parameters.items():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"tool {fn.__name__}: *{name} cannot be given by name; tools take named arguments")
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"tool {fn.__name__}: positional-only parameter {name} cannot be given by name")
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            additional = True
            continue
        prop = dict(type_schema(hints.get(name, param.annotation)))
        if param.default is inspect.Parameter.empty:
            required.append(name)
        else:
            ok, value = _json_value(param.default)
            if ok:
                prop["default"] = value
        if name in arg_docs:
            prop["description"] = arg_docs[name]
        props[name] = prop
    schema: Dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if not additional:
        schema["additionalProperties"] = False
    output: Optional[Dict[str, Any]] = None
    ret = hints.get("return", sig.return_annotation)
    if ret is not inspect.Signature.empty and ret is not None and ret is not type(None):
        out = type_schema(ret)
        if out:
            output = out
    return schema, output, description


def _converting_hints(fn: Callable[..., Any]) -> Dict[str, Any]:
    """The parameters of `fn` whose JSON argument is converted (a dataclass or an enum hint): name -> class."""
    out: Dict[str, Any] = {}
    for name, hint in _type_hints(fn).items():
        if name == "return":
            continue
        if get_origin(hint) is typing.Union or (_UnionType is not None and isinstance(hint, _UnionType)):
            candidates = [a for a in get_args(hint) if a is not type(None)]
            hint = candidates[0] if len(candidates) == 1 else hint
        if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or issubclass(hint, enum.Enum)):
            out[name] = hint
    return out


def _convert(hints: Dict[str, Any], arguments: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(arguments)
    for name, hint in hints.items():
        if name not in arguments:
            continue
        value = arguments[name]
        if isinstance(value, dict) and dataclasses.is_dataclass(hint):
            out[name] = hint(**value)
        elif issubclass(hint, enum.Enum) and not isinstance(value, enum.Enum):
            try:
                out[name] = hint(value)
            except ValueError:
                pass
    return out


def convert_arguments(fn: Callable[..., Any], arguments: Dict[str, Any]) -> Dict[str, Any]:
    """Arguments as the function expects them: dicts become dataclasses where hinted."""
    return _convert(_converting_hints(fn), arguments)


def argument_converter(fn: Callable[..., Any]) -> Optional[Callable[[Dict[str, Any]], Dict[str, Any]]]:
    """`convert_arguments` for `fn` with its type hints read once; None when no argument needs converting."""
    hints = _converting_hints(fn)
    if not hints:
        return None
    return lambda arguments: _convert(hints, arguments)


def to_json(value: Any) -> Any:
    """A tool's return value as JSON: dataclasses become dicts, enums their values, tuples lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: to_json(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    return value


__all__ = ["type_schema", "function_schema", "parse_docstring", "convert_arguments", "argument_converter", "to_json"]
