"""Schema derivation from signatures, hints and docstrings (no server)."""

import sys
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

import pytest

from toolcell import function_schema, type_schema

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # pragma: no cover
    from typing import TypedDict

    NotRequired = None


def test_scalars_and_defaults():
    def f(s: str, i: int, x: float, b: bool, flag: bool = False, n: int = 3, name: str = "a"):
        pass

    schema, output, description = function_schema(f)
    assert schema == {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "x": {"type": "number"},
            "b": {"type": "boolean"},
            "flag": {"type": "boolean", "default": False},
            "n": {"type": "integer", "default": 3},
            "name": {"type": "string", "default": "a"},
        },
        "required": ["s", "i", "x", "b"],
        "additionalProperties": False,
    }
    assert output is None and description == ""


def test_containers():
    assert type_schema(list) == {"type": "array"}
    assert type_schema(List[int]) == {"type": "array", "items": {"type": "integer"}}
    assert type_schema(Dict[str, float]) == {"type": "object", "additionalProperties": {"type": "number"}}
    assert type_schema(dict) == {"type": "object"}
    assert type_schema(Dict[str, Any]) == {"type": "object"}
    assert type_schema(Tuple[int, ...]) == {"type": "array", "items": {"type": "integer"}}
    assert type_schema(List[List[str]]) == {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}


def test_builtin_generics():
    if sys.version_info < (3, 9):  # pragma: no cover
        pytest.skip("list[int] needs 3.9")
    assert type_schema(list[int]) == {"type": "array", "items": {"type": "integer"}}
    assert type_schema(dict[str, bool]) == {"type": "object", "additionalProperties": {"type": "boolean"}}


def test_optional_union_literal_enum():
    assert type_schema(Optional[int]) == {"type": ["integer", "null"]}
    assert type_schema(Union[int, str]) == {"type": ["integer", "string"]}
    assert type_schema(Optional[List[int]]) == {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]}
    assert type_schema(Literal["a", "b"]) == {"type": "string", "enum": ["a", "b"]}
    assert type_schema(Literal[1, "x"]) == {"enum": [1, "x"]}

    class Color(Enum):
        RED = "red"
        BLUE = "blue"

    assert type_schema(Color) == {"type": "string", "enum": ["red", "blue"]}
    assert type_schema(Any) == {}


@pytest.mark.skipif(sys.version_info < (3, 10), reason="X | Y needs 3.10")
def test_pep604_union():
    assert type_schema(eval("int | None")) == {"type": ["integer", "null"]}


def test_typeddict():
    class Address(TypedDict):
        street: str
        zip: int

    class Partial(TypedDict, total=False):
        note: str

    assert type_schema(Address) == {
        "type": "object",
        "properties": {"street": {"type": "string"}, "zip": {"type": "integer"}},
        "required": ["street", "zip"],
    }
    assert type_schema(Partial) == {"type": "object", "properties": {"note": {"type": "string"}}}


@pytest.mark.skipif(NotRequired is None, reason="NotRequired needs 3.11")
def test_typeddict_not_required():
    ns = {}
    exec("class Item(TypedDict):\n    id: int\n    label: NotRequired[str]\n",
         {"TypedDict": TypedDict, "NotRequired": NotRequired}, ns)
    assert type_schema(ns["Item"]) == {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "label": {"type": "string"}},
        "required": ["id"],
    }


def test_dataclass():
    @dataclass
    class Query:
        """A search.

        Args:
            text: what to look for
        """

        text: str
        limit: int = 10
        tags: List[str] = field(default_factory=list)

    assert type_schema(Query) == {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "default": 10},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["text"],
    }


def test_google_docstring_and_output_schema():
    def search(query: str, limit: int = 5, mode: Literal["fast", "full"] = "fast") -> List[Dict[str, str]]:
        """Search the knowledge base.

        Finds documents by words.

        Args:
            query: The words to look for,
                several allowed.
            limit (int): At most this many results.
            mode: How hard to look.

        Returns:
            The matching documents.
        """

    schema, output, description = function_schema(search)
    assert description == "Search the knowledge base.\n\nFinds documents by words."
    assert schema["properties"]["query"] == {"type": "string", "description": "The words to look for, several allowed."}
    assert schema["properties"]["limit"]["description"] == "At most this many results."
    assert schema["properties"]["mode"] == {"type": "string", "enum": ["fast", "full"], "default": "fast",
                                           "description": "How hard to look."}
    assert output == {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string"}}}


def test_sphinx_docstring():
    def f(a: int):
        """Do it.

        :param a: the number
        """

    schema, _, description = function_schema(f)
    assert description == "Do it."
    assert schema["properties"]["a"]["description"] == "the number"


def test_async_function_and_kwargs():
    async def f(x: int, **rest: Any) -> None:
        pass

    schema, output, _ = function_schema(f)
    assert "additionalProperties" not in schema and schema["required"] == ["x"]
    assert output is None


def test_string_annotations():
    ns = {}
    exec("from __future__ import annotations\nfrom typing import Optional\n"
         "def f(a: Optional[int], b: list[str] = []) -> dict: ...", ns)
    schema, output, _ = function_schema(ns["f"])
    assert schema["properties"]["a"] == {"type": ["integer", "null"]}
    assert schema["properties"]["b"] == {"type": "array", "items": {"type": "string"}, "default": []}
    assert output == {"type": "object"}


def test_varargs_refused():
    def f(*items: int):
        pass

    with pytest.raises(TypeError, match="named arguments"):
        function_schema(f)


def test_annotated_description():
    from typing import Annotated

    def f(city: Annotated[str, "The city, e.g. Paris"], days: Annotated[int, "How many days"] = 3):
        pass

    schema, _, _ = function_schema(f)
    assert schema["properties"] == {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "days": {"type": "integer", "description": "How many days", "default": 3},
    }


def test_arguments_are_converted_to_hinted_classes():
    from toolcell._schema import convert_arguments, to_json

    class Unit(Enum):
        C = "celsius"
        F = "fahrenheit"

    @dataclass
    class Place:
        city: str
        country: str = "FR"

    def f(place: Place, unit: Unit = Unit.C, note: Optional[Place] = None):
        pass

    args = convert_arguments(f, {"place": {"city": "Paris"}, "unit": "fahrenheit", "note": {"city": "Lyon"}})
    assert args == {"place": Place("Paris"), "unit": Unit.F, "note": Place("Lyon")}
    schema, _, _ = function_schema(f)
    assert schema["properties"]["unit"] == {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
    assert to_json({"p": Place("Nice"), "u": Unit.C, "t": (1, 2)}) == {"p": {"city": "Nice", "country": "FR"},
                                                                       "u": "celsius", "t": [1, 2]}


def test_python_38_get_type_hints_without_include_extras(monkeypatch):
    # Python 3.8's get_type_hints has no include_extras: the hints are read without it
    import typing

    real = typing.get_type_hints

    def py38(obj, globalns=None, localns=None, **kw):
        if "include_extras" in kw:
            raise TypeError("get_type_hints() got an unexpected keyword argument 'include_extras'")
        return real(obj, globalns, localns)

    monkeypatch.setattr(typing, "get_type_hints", py38)

    def f(a: "int", b: "Optional[str]" = None) -> "float":
        return 1.0

    inp, out, _ = function_schema(f)
    assert inp["properties"]["a"] == {"type": "integer"}
    assert inp["properties"]["b"]["type"] == ["string", "null"]
    assert out == {"type": "number"}
