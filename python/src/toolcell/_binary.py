"""Where the `toolcell` binary is: the one installed with this package."""

import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import List, Optional

from ._errors import ToolcellError

_EXE = "toolcell"


def _candidates() -> List[Path]:
    out = []
    # The wheel puts the binary into the scripts directory of the
    # environment it is installed into (the venv's bin/).
    scripts = sysconfig.get_path("scripts")
    if scripts:
        out.append(Path(scripts) / _EXE)
    # `pip install --user`
    user_scheme = "posix_user" if os.name == "posix" else "nt_user"
    try:
        user_scripts = sysconfig.get_path("scripts", user_scheme)
    except KeyError:  # pragma: no cover - scheme missing on exotic builds
        user_scripts = None
    if user_scripts:
        out.append(Path(user_scripts) / _EXE)
    # `pip install --target DIR`: DIR/bin next to DIR/toolcell
    out.append(Path(__file__).resolve().parent.parent / "bin" / _EXE)
    # the interpreter's own directory (a venv run without activation)
    out.append(Path(sys.executable).parent / _EXE)
    return out


def find_toolcell_bin() -> str:
    """The path of the `toolcell` binary to run.

    `$TOOLCELL` when set; else the binary installed with this package (the
    environment's scripts directory); else `toolcell` on `PATH`.
    """
    env = os.environ.get("TOOLCELL")
    if env:
        return env
    for path in _candidates():
        if path.is_file() and os.access(str(path), os.X_OK):
            return str(path)
    found: Optional[str] = shutil.which(_EXE)
    if found:
        return found
    raise ToolcellError(
        "the toolcell binary was not found: it is installed with the `toolcell` wheel into "
        "the environment's bin/ directory; set TOOLCELL=/path/to/toolcell to use another one"
    )
