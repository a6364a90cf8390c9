"""One base for every error the user can fix, so every command reports it the same way: one line, exit 1.

A command raises a :class:`UserError` (or a subclass) with a message that names the file, the key or the
value and says what to do; ``cuvee.cli`` prints it as ``Error: <message>`` and exits 1, with the traceback
only under ``-v``. Anything that is not a UserError is a bug and is reported as unexpected.
"""

from __future__ import annotations


class UserError(Exception):
    """Something the user asked for that cannot be done as asked; the message says why and what to do."""

    exit_code = 1
