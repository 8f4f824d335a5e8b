"""What a local save may replace (lazystore.sinks.targets): a symlink's
target, through the link; never a device, FIFO, socket or folder; and
names up to the file system's limit.

Never aimed at a system path: the device, FIFO and socket are made inside
tmp_path (a char device with /dev/null's numbers, where mknod is allowed)."""

from __future__ import annotations

import contextlib
import os
import socket
import stat

import numpy as np
import pytest

import lazystore as ls
from lazystore.sinks.partials import PARTIAL_NAME
from tests.cli.helpers import run


def saved(version: int) -> dict:
    return {"w": np.full(64, version, np.float32)}


def holds(path, version: int) -> bool:
    with ls.open(path) as ck:
        return ck.verify() == [] and np.array_equal(ck["w"], saved(version)["w"])


def names(folder) -> list[str]:
    return sorted(os.listdir(folder))


# -- symlinks ------------------------------------------------------------------------------


def test_saving_onto_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "ck.lzy"
    ls.save(saved(1), target)
    link = tmp_path / "latest.lzy"
    link.symlink_to(os.path.join("real", "ck.lzy"))  # relative, as `ln -s` makes them
    ls.save(saved(2), link)
    assert link.is_symlink() and os.readlink(link) == os.path.join("real", "ck.lzy")
    assert holds(target, 2) and holds(link, 2)
    assert names(tmp_path) == ["latest.lzy", "real"] and names(tmp_path / "real") == ["ck.lzy"]


def test_a_chain_of_symlinks_is_followed_to_the_file(tmp_path):
    target = tmp_path / "ck.lzy"
    ls.save(saved(1), target)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a").symlink_to(target)  # absolute
    (tmp_path / "b").symlink_to(os.path.join("sub", "a"))
    w = ls.Writer(tmp_path / "b")
    w.add("w", saved(2)["w"])
    w.close()
    assert w.path == tmp_path / "b"  # the caller's name, not the resolved one
    assert holds(target, 2)
    assert (tmp_path / "b").is_symlink() and (tmp_path / "sub" / "a").is_symlink()


def test_a_dangling_symlink_gets_its_target_written(tmp_path):
    # As open(path, "w") and torch.save do: the link stays, its target appears.
    link = tmp_path / "ck.lzy"
    link.symlink_to("new.lzy")
    ls.save(saved(1), link)
    assert link.is_symlink() and holds(tmp_path / "new.lzy", 1)
    assert names(tmp_path) == ["ck.lzy", "new.lzy"]


def test_a_symlink_loop_is_refused_and_left_alone(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(ls.InvalidInputError, match="symbolic links"):
        ls.save(saved(1), tmp_path / "a")
    assert names(tmp_path) == ["a", "b"] and os.readlink(tmp_path / "a") == "b"


def test_a_killed_save_through_a_link_is_cleaned_where_its_file_was(tmp_path):
    # The partial file sits beside the resolved target, so the next save
    # through the link cleans that folder.
    (tmp_path / "real").mkdir()
    link = tmp_path / "ck.lzy"
    link.symlink_to(os.path.join("real", "ck.lzy"))
    w = ls.Writer(link)
    w.add("w", saved(1)["w"])
    (partial,) = os.listdir(tmp_path / "real")
    assert PARTIAL_NAME.fullmatch(partial) and partial.startswith(".ck.lzy.")
    w.abort()
    assert names(tmp_path / "real") == []


# -- what is not a plain file --------------------------------------------------------------


def _char_device(path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")


@contextlib.contextmanager
def special(kind: str, path):
    """A ``kind`` of non-plain file at ``path`` for the block."""
    if kind == "char device":
        _char_device(path)
    elif kind == "fifo":
        os.mkfifo(path)  # never opened here: a write-open would block
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(str(path))
        except OSError as exc:  # a path too long for sun_path
            sock.close()
            pytest.skip(f"cannot bind a socket here: {exc}")
        with sock:
            yield
        return
    elif kind == "folder":
        path.mkdir()
        (path / "keep").write_text("x")
    yield


def identity(path) -> tuple:
    st = os.lstat(path)
    return st.st_ino, st.st_mode, st.st_rdev, st.st_mtime_ns


KINDS = ["char device", "fifo", "socket", "folder"]


@pytest.mark.parametrize("kind", KINDS)
def test_saving_onto_what_is_not_a_plain_file_is_refused_and_leaves_it(tmp_path, kind):
    path = tmp_path / "null"
    with special(kind, path):
        before = identity(path)
        with pytest.raises(ls.InvalidInputError, match="not a plain file") as raised:
            ls.save(saved(1), path)
        assert str(path) in str(raised.value)
        assert identity(path) == before and names(tmp_path) == ["null"]


@pytest.mark.parametrize("kind", ["char device", "fifo"])
def test_a_symlink_to_what_is_not_a_plain_file_is_refused(tmp_path, kind):
    with special(kind, tmp_path / "null"):
        before = identity(tmp_path / "null")
        (tmp_path / "ck.lzy").symlink_to("null")
        with pytest.raises(ls.InvalidInputError, match="not a plain file"):
            ls.save(saved(1), tmp_path / "ck.lzy")
        assert identity(tmp_path / "null") == before and names(tmp_path) == ["ck.lzy", "null"]


def test_every_kind_of_save_refuses_a_device(tmp_path):
    # Every local save goes through the one local sink: safetensors, torch,
    # the CLI's convert (the report: `lazystore convert m.lzy /dev/null`).
    from lazystore.interop import to_safetensors

    path = tmp_path / "null"
    _char_device(path)
    before = identity(path)
    src = tmp_path / "m.lzy"
    ls.save(saved(1), src)
    with pytest.raises(ls.InvalidInputError):
        to_safetensors(src, path)
    torch_files = pytest.importorskip("lazystore.torch")
    torch = pytest.importorskip("torch")
    with pytest.raises(ls.InvalidInputError):
        torch_files.save_file({"w": torch.ones(3)}, path)
    assert identity(path) == before and names(tmp_path) == ["m.lzy", "null"]


def test_cli_convert_onto_a_device_fails_cleanly(capsys, tmp_path):
    path = tmp_path / "null"
    _char_device(path)
    before = identity(path)
    src = tmp_path / "m.lzy"
    ls.save(saved(1), src)
    code, _, err = run(capsys, "convert", src, path)
    assert code == 2 and "not a plain file" in err and str(path) in err
    assert identity(path) == before and names(tmp_path) == ["m.lzy", "null"]


def test_a_target_swapped_for_a_fifo_during_the_save_is_not_replaced(tmp_path):
    # Checked when the save starts and again just before the rename.
    path = tmp_path / "ck.lzy"
    ls.save(saved(1), path)
    w = ls.Writer(path)
    w.add("w", saved(2)["w"])
    path.unlink()
    os.mkfifo(path)
    before = identity(path)
    with pytest.raises(ls.InvalidInputError, match="not a plain file"):
        w.close()
    assert identity(path) == before and names(tmp_path) == ["ck.lzy"]


# -- long names ----------------------------------------------------------------------------


@pytest.mark.parametrize("stem", ["a" * 246, "é" * 123], ids=["ascii", "two-byte"])
def test_the_longest_legal_file_name_saves(tmp_path, stem):
    name = stem + ".lzy"
    assert len(os.fsencode(name)) == 250
    path = tmp_path / name
    ls.save(saved(1), path)
    with ls.Writer(path) as w:  # a second save, while its partial file exists
        w.add("w", saved(2)["w"])
        (partial,) = [n for n in os.listdir(tmp_path) if n != name]
        limit = os.pathconf(tmp_path, "PC_NAME_MAX")
        assert len(os.fsencode(partial)) <= limit
        assert PARTIAL_NAME.fullmatch(partial) and partial.startswith("." + stem[:8])
        os.fsencode(partial).decode("utf-8")  # cut on a character boundary
    assert holds(path, 2) and names(tmp_path) == [name]
