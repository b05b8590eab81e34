from scaler.protocol.message_limits import show_size


def test_show_size():
    assert show_size(0) == "0 bytes"
    assert show_size(1023) == "1023 bytes"
    assert show_size(1536) == "1.5 KiB"
    assert show_size(64 << 20) == "64.0 MiB"
    assert show_size(3 << 40) == "3.0 TiB"
