"""`python -m toolcell ...` runs the toolcell binary installed with this package."""

import os
import sys

from ._binary import find_toolcell_bin


def main() -> None:
    binary = find_toolcell_bin()
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
