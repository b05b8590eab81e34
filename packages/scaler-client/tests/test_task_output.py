"""How the client shows what tasks print (``Client(stream_output=True)``)."""

from __future__ import annotations

from scaler.client.task_output import OutputPrinter
from scaler.protocol.ids import show
from scaler.protocol.messages import OutputStream, TaskOutput

A, B = b"\x01" * 16, b"\x02" * 16


def test_every_line_is_prefixed_with_its_task_once_even_across_pieces(capsys):
    printer = OutputPrinter()
    out, err = OutputStream.STDOUT, OutputStream.STDERR
    printer.print([TaskOutput(A, b"c", out, "one\ntw"), TaskOutput(B, b"c", out, "other\n")])
    printer.print([TaskOutput(A, b"c", out, "o\nthree\n"), TaskOutput(A, b"c", err, "oops\n")])
    a, b = f"[task {show(A)}] ", f"[task {show(B)}] "
    captured = capsys.readouterr()
    assert captured.out == f"{a}one\n{a}tw{b}other\no\n{a}three\n"
    assert captured.err == f"{a}oops\n"
