"""How a failed task's exception travels back to its client.

The payload of a failed `TaskResult` is ``cloudpickle.dumps((exception, traceback_text))``.
An exception that cannot make the round trip (it does not pickle, or does not
unpickle: a custom ``__init__`` signature is the usual culprit) travels as
text instead: empty payload, ``error_text = "<ExcType>: <message>\\n<traceback>"``.
"""

from __future__ import annotations

import traceback
from typing import Optional, Tuple

import cloudpickle

_UPLOAD_HINT = "on the worker: install it on the workers' hosts, or send it to them with client.upload_file"


def failure_payload(exception: BaseException, traceback_text: Optional[str] = None) -> Tuple[bytes, str]:
    """``(payload, error_text)`` of a failed result carrying ``exception``; exactly one of them is non-empty."""
    if isinstance(exception, ModuleNotFoundError):
        _hint_upload(exception)
    if traceback_text is None:
        traceback_text = "".join(traceback.format_exception_only(type(exception), exception))
    try:
        payload = cloudpickle.dumps((exception, traceback_text))
        cloudpickle.loads(payload)  # the client must be able to load it, or it gets nothing useful
    except Exception:
        return b"", f"{type(exception).__name__}: {exception}\n{traceback_text}"
    return payload, ""


def _hint_upload(error: ModuleNotFoundError) -> None:
    """A module the worker lacks (raised by the task, or while its function or arguments were loaded): its message
    says how to give the workers the module (once: a function that failed to load is cached with its error)."""
    message = error.msg or str(error)
    if _UPLOAD_HINT in message:
        return
    top = (error.name or "").split(".")[0]
    hinted = f"{message} {_UPLOAD_HINT}({top + '.py' if top else 'PATH'!r}) (or as a .zip or .whl)"
    error.msg = hinted
    error.args = (hinted, *error.args[1:])


ERROR_LINE_CHARACTERS = 300  # of a failure's one-line summary in the task runs (monitors, reports)


def error_line(exception: BaseException) -> str:
    """``exception`` in one line (``ValueError: bad input``), cut to `ERROR_LINE_CHARACTERS`, for the task runs."""
    try:
        text = f"{type(exception).__name__}: {exception}"
    except Exception:  # noqa: BLE001 - its __str__ raised
        text = type(exception).__name__
    lines = text.splitlines()
    return (lines[0] if lines else "")[:ERROR_LINE_CHARACTERS]
