"""lazystore.cli.errors: the one line an error becomes, naming the file the user
asked for (once), never a writer's temporary file or the bytes of a file."""

from __future__ import annotations

import errno

import pytest

import lazystore as ls
from lazystore.cli import errors, main
from lazystore.testing.faults import SyscallFaults
from tests.cli.helpers import assert_one_error_line, run


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


# -- error lines through the command --------------------------------------------------------


def test_an_error_names_the_destination_not_the_temporary_file(capsys, tmp_path, model):
    blocker = tmp_path / "file.lzy"
    blocker.write_bytes(b"x")
    for dst in (blocker / "out.lzy", tmp_path / "missing" / "out.safetensors"):
        code, out, err = run(capsys, "convert", model, dst)
        assert code == 2 and out == ""
        assert_one_error_line(err)
        assert err.startswith(f"lazystore: error: {dst}: "), err
        assert ".partial" not in err and "spool" not in err


@pytest.mark.slow
def test_a_failing_save_names_the_destination_at_every_step(capsys, tmp_path, model):
    # The k-th write, fsync or rename of the conversion fails, for every k:
    # whichever it is, the line names DST, never the partial file behind it.
    dst = tmp_path / "out.lzy"
    with SyscallFaults() as dry:
        assert main(["convert", str(model), str(dst)]) == 0
    capsys.readouterr()
    dst.unlink()
    for k in range(1, dry.count + 1):
        with SyscallFaults(fail_at=k, errno=errno.ENOSPC):
            code, out, err = run(capsys, "convert", model, dst)
        if code == 0:  # a failed fsync of the folder, after the rename, may be survivable
            continue
        assert code == 2 and ".partial" not in err, (k, err)
        assert_one_error_line(err)
        assert f"{dst}: " in err and err.count(str(dst)) == 1, (k, err)


def test_a_library_error_that_names_the_file_is_not_prefixed_again(capsys, tmp_path):
    code, _, err = run(capsys, "info", tmp_path)
    assert code == 2 and err.count(str(tmp_path)) == 1, err
    assert_one_error_line(err)


def test_a_non_checkpoint_file_is_not_echoed(capsys, tmp_path):
    secret = tmp_path / "shadow"
    secret.write_bytes(b"s3cr:*:20000:0:99999:7:::\n" * 4)
    with pytest.raises(ls.FormatError) as info:
        ls.open(secret)
    assert "s3cr" not in str(info.value) and str(secret) in str(info.value)
    code, _, err = run(capsys, "info", secret)
    assert code == 2 and "s3cr" not in err and "unknown magic" in err and err.count(str(secret)) == 1


def test_torch_refusal_is_plain_and_whole(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "x": _NotAllowed()}, path)
    code, _, err = run(capsys, "convert", path, tmp_path / "out.lzy")
    assert code == 2 and "\x1b" not in err
    assert_one_error_line(err)
    # torch's own reason (which global was refused), whole, not its advice to turn safety off
    assert "_NotAllowed was not an allowed global" in err and "weights_only` set to `False" not in err
    assert err.count(str(path)) == 1


class _NotAllowed:
    pass
