"""The exception and warning types the package raises for bad input or configuration, and how their lines echo
what the user gave."""

import re


class MiaFastError(ValueError):
    """A problem with the user's input or setup, with a message that says what to do."""


class MiaFastWarning(UserWarning):
    """Something in the user's input was changed or is doubtful, and the run goes on (e.g. a text cleaned of lone
    surrogates); the CLI prints each as one line."""


# The most characters of a value a line echoes: enough to recognise a path, a name or a URL.
SHOWN_CHARACTERS = 160
# The most characters of a whole printed line.
LINE_CHARACTERS = 1000
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def shown(value: object, *, quote: bool = True) -> str:
    """A value as a line echoes it: a string quoted (a path unquoted with ``quote=False``, where it prints as it
    is), anything else as Python writes it, and a long one cut in the middle with its length said."""
    if not isinstance(value, str):
        text = repr(value)
        return text if len(text) <= SHOWN_CHARACTERS else shown(text, quote=False)
    if len(value) <= SHOWN_CHARACTERS:
        return repr(value) if quote or not value.isprintable() else value
    head, tail = value[: SHOWN_CHARACTERS * 2 // 3], value[-SHOWN_CHARACTERS // 4 :]
    return f"{head + '…' + tail!r} ({len(value):,} characters)"


def readable(line: str) -> str:
    """A line as it is printed: one line (control characters escaped), and one a person can read (a line of more
    than LINE_CHARACTERS is cut in the middle)."""
    line = _CONTROL.sub(lambda match: repr(match[0])[1:-1], line)
    if len(line) <= LINE_CHARACTERS:
        return line
    head, tail = line[: LINE_CHARACTERS * 3 // 4], line[-LINE_CHARACTERS // 5 :]
    return f"{head} […{len(line) - len(head) - len(tail):,} characters…] {tail}"


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message on one line (its lines joined, so a sentence continued on the next is kept), cut to
    about ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    whole_words = head if text[limit - 1] == " " else head.rsplit(" ", 1)[0]  # a word cut short goes, not one whole
    return whole_words + " …"
