"""lazystore.cli.errors: the one line an OS error becomes."""

from __future__ import annotations

from lazystore.cli import errors


def test_os_error_lines(tmp_path):
    assert errors.os_error(FileNotFoundError(2, "No such file or directory", "x.lzy"), None) == \
        "x.lzy: No such file or directory"
    try:  # a filesystem that puts only the path in its message
        try:
            raise ConnectionRefusedError(111, "Connect call failed")
        except ConnectionRefusedError as cause:
            raise FileNotFoundError("http://host/x.lzy") from cause
    except FileNotFoundError as exc:
        line = errors.os_error(exc, "http://host/x.lzy")
    assert line == "http://host/x.lzy: FileNotFoundError: [Errno 111] Connect call failed"
    expected = f"{tmp_path}: is a folder, not a checkpoint file"
    assert errors.os_error(OSError(22, "Invalid argument"), tmp_path) == expected
