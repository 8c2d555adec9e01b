

__all__ = ["ToolError", "json_parse", "shell_quote", "retry", "batch", "enums", "get_user", "legacy", "maybe", "nested", "ordering", "ping", "print_"]


def batch(items: List[Dict[str, Any]], ratio: float = 0.5, dry: bool = False) -> List[Dict[str, Any]]:
    """Arrays of objects.

    Args:
        items (List[Dict[str, Any]]): The records.
        ratio (float):
        dry (bool):

    Returns:
        [{id: int, ok: bool}]

    Raises:
        ToolError: the host refused the call or the tool failed.
    """
    return _call("batch", {"items": items, "ratio": ratio, "dry": dry})


def enums(mode: Literal["fast", "slow"], level: Literal[1, 2, 3] = 2, shape: Any = None) -> Any:
    """Enumerations.

    Args:
        mode (Literal["fast", "slow"]):
        level (Literal[1, 2, 3]):
        shape (Any):

    Returns:
        Any: the tool's JSON result (its shape is not declared).

    Raises:
        ToolError: the host refused the call or the tool failed.
    """
    _args = {"mode": mode, "level": level}
    if shape is not None:
        _args["shape"] = shape
    return _call("enums", _args)


def get_user(id: int, from_: Optional[str] = None, class_: Literal["staff", "guest"] = "guest") -> Dict[str, Any]:
    """Look a user up.
    Returns the user's record.

    The host knows this tool as "get-user".

    Args:
        id (int): The user's id.
        from_ (Optional[str]): Directory to search. (sent as "from")
        class_ (Literal["staff", "guest"]): Kind of user. (sent as "class")

    Returns:
        {id: int, name: str}

    Raises:
        ToolError: the host refused the call or the tool failed.
    """
    _args = {"id": id, "class": class_}
    if from_ is not None:
        _args["from"] = from_
    return _call("get-user", _args)


def legacy(thing: Dict[str, Any]) -> Any:
    """A draft-07 schema with definitions.

    Args:
        thing (Dict[str, Any]):

    Returns:
        Any: the tool's JSON result (its shape is not declared).

    Raises:
        ToolError: the host refused the call or the tool failed.
    """
    return _call("legacy", {"thing": thing})


def maybe(note: Optional[str] = None, count: Optional[int] = None, either: Optional[Union[str, int]] = None) -> Any:
    """Unions with null.

    Args:
        note (Optional[str]): A note, or null.
        count (Optional[int]):
        either (Optional[Union[str, int]]):

    Returns:
        Any: the tool's JSON result (its shape is not declared).

    Raises:
        ToolError: the host refused the call or the tool failed.
    """
    _args = {"note": note, "count": count}
    if either is not None:
        _args["either"] = either
    return _call("maybe", _args)


def nested(filter: Dict[str, Any], address: Dict[str, Any]) -> Dict[str, Any]:
    """Nested objects and a $ref chain.

    Args:
        filter (Dict[str, Any]): What to match.
        address (Dict[str, Any]): A postal address.

    Returns:
        {match: {score: float}}

    Raises:
        ToolError: the host refused the call or the tool failed.
    """
    return _call("nested", {"filter": filter, "address": address})


def ordering(b: str, d: List[Any], a: Optional[str] = None, c: int = 3, my_key: Optional[str] = None, _call_: Optional[str] = None) -> Any:
    """Required properties after optional ones.

    Args:
        b (str):
        d (List[Any]):
        a (Optional[str]):
        c (int):
        my_key (Optional[str]): Not an identifier. (sent as "my-key")
        _call_ (Optional[str]): (sent as "_call")

    Returns:
        Any: the tool's JSON result (its shape is not declared).

    Raises:
        ToolError: the host refused the call or the tool failed.
    """
    _args = {"b": b, "d": d, "c": c}
    if a is not None:
        _args["a"] = a
    if my_key is not None:
        _args["my-key"] = my_key
    if _call_ is not None:
        _args["_call"] = _call_
    return _call("ordering", _args)


def ping() -> Any:
    """Call the host tool "ping".

    Returns:
        Any: the tool's JSON result (its shape is not declared).

    Raises:
        ToolError: the host refused the call or the tool failed.
    """
    return _call("ping", {})


def print_() -> Any:
    """Named like a builtin.

    The host knows this tool as "print".

    Returns:
        Any: the tool's JSON result (its shape is not declared).

    Raises:
        ToolError: the host refused the call or the tool failed.
    """
    return _call("print", {})
