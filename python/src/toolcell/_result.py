"""The result of a cell, typed: mirrors the result object of `toolcell serve`.

Every field the server documents has an attribute; fields this version does
not know (added by a newer server) are kept in `extra`, and the whole object
as received is in `raw`.
"""

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")


def _split(cls: Type[Any], data: Dict[str, Any]):
    names = {f.name for f in fields(cls)} - {"extra", "raw"}
    known = {k: v for k, v in data.items() if k in names}
    extra = {k: v for k, v in data.items() if k not in names}
    return known, extra


@dataclass
class KernelInfo:
    """Which kernel ran the cell."""

    id: str = ""
    mode: str = ""
    python: str = ""
    reused: bool = False
    execution_count: int = 0
    state_reset: bool = False
    state_kept: Optional[bool] = None
    ended: Optional[bool] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "KernelInfo":
        known, extra = _split(cls, data or {})
        return cls(**known, extra=extra)


@dataclass
class Usage:
    """CPU seconds of the cell and the kernel's peak resident memory (KiB)."""

    cpu_seconds: float = 0.0
    peak_rss_kb: int = 0
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Usage":
        known, extra = _split(cls, data or {})
        return cls(**known, extra=extra)


@dataclass
class Display:
    """A file the cell produced for display (a matplotlib figure)."""

    mime: str = ""
    path: str = ""
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Display":
        known, extra = _split(cls, data or {})
        return cls(**known, extra=extra)


@dataclass
class FileChange:
    """One file the cell created, modified or deleted (path relative to the kernel's cwd)."""

    path: str = ""
    bytes: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "FileChange":
        known, extra = _split(cls, data or {})
        return cls(**known, extra=extra)


@dataclass
class FilesChanged:
    """What the cell did to the files under the kernel's working directory."""

    created: List[FileChange] = field(default_factory=list)
    modified: List[FileChange] = field(default_factory=list)
    deleted: List[FileChange] = field(default_factory=list)
    truncated: bool = False
    counts: Optional[Dict[str, int]] = None
    scan_stopped: Optional[bool] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "FilesChanged":
        known, extra = _split(cls, data or {})
        for kind in ("created", "modified", "deleted"):
            known[kind] = [FileChange.from_dict(c) for c in known.get(kind) or []]
        return cls(**known, extra=extra)


@dataclass
class ExecuteResult:
    """How a cell ended: `status` is success, error, timeout, interrupted or refused."""

    status: str
    output: str = ""
    exit_code: int = 0
    tool_calls_made: int = 0
    duration_seconds: float = 0.0
    kernel: KernelInfo = field(default_factory=KernelInfo)
    error: Optional[str] = None
    hint: Optional[str] = None
    warning: Optional[str] = None
    stdout_truncated: bool = False
    stdout_bytes_captured: int = 0
    stdout_bytes_total: int = 0
    stdout_bytes_omitted: int = 0
    stdout_spill_path: Optional[str] = None
    stdin_requested: bool = False
    usage: Optional[Usage] = None
    display: List[Display] = field(default_factory=list)
    files: Optional[FilesChanged] = None
    #: fields of the result this client does not know
    extra: Dict[str, Any] = field(default_factory=dict)
    #: the result object exactly as the server sent it
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when the cell ran to its end (`status == "success"`)."""
        return self.status == "success"

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ExecuteResult":
        known, extra = _split(cls, data)
        if "kernel" in known:
            known["kernel"] = KernelInfo.from_dict(known["kernel"])
        if known.get("usage") is not None:
            known["usage"] = Usage.from_dict(known["usage"])
        known["display"] = [Display.from_dict(d) for d in known.get("display") or []]
        if known.get("files") is not None:
            known["files"] = FilesChanged.from_dict(known["files"])
        known.setdefault("status", "error")
        return cls(**known, extra=extra, raw=data)
