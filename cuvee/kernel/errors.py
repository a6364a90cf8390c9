"""One base for every error the user can fix, so every command reports it the same way: one line, exit 1.

A command raises a :class:`UserError` (or a subclass) with a message that names the file, the key or the
value and says what to do; ``cuvee.cli`` prints it as ``Error: <message>`` and exits 1, with the traceback
only under ``-v``. Anything that is not a UserError is a bug and is reported as unexpected.
"""

from __future__ import annotations


class UserError(Exception):
    """Something the user asked for that cannot be done as asked; the message says why and what to do."""

    exit_code = 1


def one_line(message: str) -> str:
    """A message as one line: its non-empty lines joined by '; ' (by a space after a ':'), whitespace collapsed.

    Why: a multi-line error (a plan difference lists one key per line) collapsed by ``" ".join(split())`` runs
    its sentences together; every command that prints an error as its one line goes through this instead."""
    out = ""
    for line in str(message).splitlines():
        if line.strip():
            line = " ".join(line.split())
            out = f"{out}{' ' if out.endswith(':') else '; ' if out else ''}{line}"
    return out
