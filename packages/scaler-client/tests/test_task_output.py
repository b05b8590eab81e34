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


def test_control_sequences_are_shown_escaped_and_never_reach_the_terminal(capsys):
    printer = OutputPrinter()
    hostile = (
        "\x1b[31mred\x1b[0m\ttab\n"  # colours (ESC, CSI)
        "\x1b]0;new title\x07\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\\n"  # OSC: window title, hyperlink
        "progress\rover\x08written\x9b2J\x85\x7f\x00\n"  # carriage return, backspace, C1 CSI and NEL, DEL, NUL
        "caf\u00e9 \u2603 \u00a0ok\n"  # printable text beyond ASCII is kept as it is
    )
    printer.print([TaskOutput(A, b"c", OutputStream.STDOUT, hostile)])
    a = f"[task {show(A)}] "
    assert capsys.readouterr().out == (
        f"{a}\\x1b[31mred\\x1b[0m\ttab\n"
        f"{a}\\x1b]0;new title\\x07\\x1b]8;;http://evil\\x1b\\link\\x1b]8;;\\x1b\\\n"
        f"{a}progress\\x0dover\\x08written\\x9b2J\\x85\\x7f\\x00\n"
        f"{a}caf\u00e9 \u2603 \u00a0ok\n"
    )
