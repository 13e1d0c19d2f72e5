"""Lint: no Python module over 400 lines without a reason written at its top (issue #14).

A module may be longer when the first lines of its docstring say why ("over 400 lines because
..."). Run by scripts/test.sh before the tests; prints each offender and exits 1."""
from __future__ import annotations

import subprocess
import sys

LIMIT = 400
HEAD_LINES = 15


def main() -> int:
    files = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for path in files:
        if "/migrations/" in path:
            continue
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except FileNotFoundError:  # deleted in the working tree, not yet in the index
            continue
        if len(lines) > LIMIT and "over 400 lines" not in "\n".join(lines[:HEAD_LINES]).lower():
            offenders.append(f"{path}: {len(lines)} lines and no 'over 400 lines because ...' at its top")
    for line in offenders:
        print(line)
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main())
