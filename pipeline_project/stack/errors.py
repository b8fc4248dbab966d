"""The one exception the stack raises: its message is a single line meant for a human."""


class StackError(RuntimeError):
    """A stack operation failed; `str(err)` is one clear line (no traceback needed)."""
