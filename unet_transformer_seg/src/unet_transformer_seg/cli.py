"""Shared entry-point behaviour: user errors become `error: <message>` on stderr and exit status 2."""

from __future__ import annotations

import sys
from typing import Callable

from .errors import UserError

USER_ERROR_STATUS = 2


def run_main(main: Callable[[], int | None]) -> None:
    """Call main(); exit with its return value, or print a UserError without traceback and exit 2."""
    try:
        status = main()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(USER_ERROR_STATUS)
    sys.exit(status or 0)
