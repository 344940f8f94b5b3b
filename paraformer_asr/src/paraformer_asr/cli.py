"""Shared command-line plumbing: user errors -> 'error: ...' on stderr and exit status 2."""

from __future__ import annotations

import sys
from typing import Callable

from paraformer_asr.errors import UserError

USER_ERROR_EXIT = 2


def run_main(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Call ``main(argv)``; a UserError prints ``error: <message>`` to stderr and returns 2 (no traceback)."""
    try:
        return int(main(argv) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USER_ERROR_EXIT
