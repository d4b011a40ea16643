"""The one exception type that user errors travel in.

Everything a user can get wrong (a recipe key, a file path, a label) raises `LongbertError` with one line that
names what is wrong and where. The CLI prints that line and exits non-zero without a traceback; library callers
can catch it.
"""


class LongbertError(Exception):
    """A user error: bad recipe, bad data, bad model folder. The message is meant to be shown as it is."""


def first_line(error: BaseException) -> str:
    """The first line of what another library raised (or its type's name when it said nothing), to end a
    LongbertError line with."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
