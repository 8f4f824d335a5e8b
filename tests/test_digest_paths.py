"""``digest=`` on every save path (docs/format.md §10.1): ``ls.save`` (one
file, a sharded folder, a file object), ``lazystore.torch.save_file`` and
``save_model``, ``CheckpointManager`` (its rewrites of older checkpoints as
deltas included), and the command line's ``convert`` / ``merge`` /
``info``. Each file written records its chunk digests, and a verified read
of it checks them."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import lazystore as ls
from lazystore.interop import digest_of
from tests.cli.helpers import assert_one_error_line, run

DIGEST_KEY = "__lazystore_digest__"


def state(step: int = 0) -> dict:
    return {"w": np.linspace(0, 1, 4096, dtype=np.float32).reshape(64, 64) + step,
            "frozen": np.arange(2048, dtype=np.int32).reshape(32, 64),
            "b": np.full(8, step, np.float64)}


def algorithm(path) -> str | None:
    """The digest algorithm the file (or every shard of a folder) declares, read from its bytes."""
    with ls.open(path) as ck:
        found = {digest_of(part) for part in getattr(ck, "shards", [ck])}
        versions = {part.format_version for part in getattr(ck, "shards", [ck])}
    assert len(found) == 1, found
    (name,) = found
    assert versions == ({(1, 4)} if name else versions)
    return name


# -- ls.save -----------------------------------------------------------------------------------


def test_a_sharded_save_records_digests_in_every_shard(tmp_path):
    ls.save(state(), tmp_path / "folder", max_shard_size=8192, digest="sha256")
    with ls.open(tmp_path / "folder") as ck:
        assert len(ck.shards) >= 2 and ck.verify() == []
    assert algorithm(tmp_path / "folder") == "sha256"
    assert ls.load(tmp_path / "folder")["w"].tobytes() == state()["w"].tobytes()


def test_a_save_to_a_file_object_records_digests(tmp_path):
    buffer = io.BytesIO()
    ls.save(state(), buffer, digest="blake3")
    (tmp_path / "b.lzy").write_bytes(buffer.getvalue())
    assert algorithm(tmp_path / "b.lzy") == "blake3"


def test_nested_state_with_digests_loads_as_saved(tmp_path):
    nested = {"model": state(), "step": 3, "opt": [state(1)["b"]]}
    ls.save(nested, tmp_path / "n.lzy", compression="zstd", digest="blake3")
    back = ls.load(tmp_path / "n.lzy")
    assert back["step"] == 3 and back["opt"][0].tolist() == [1.0] * 8
    assert algorithm(tmp_path / "n.lzy") == "blake3"


def test_safetensors_holds_no_digests(tmp_path):
    with pytest.raises(ls.InvalidInputError, match="digest set"):
        ls.save({"a": np.ones(2)}, tmp_path / "a.safetensors", digest="blake3")
    ls.save({"a": np.ones(2)}, tmp_path / "a.safetensors", digest=None)  # the default, said aloud
    assert ls.load(tmp_path / "a.safetensors")["a"].tolist() == [1.0, 1.0]


# -- torch --------------------------------------------------------------------------------------


def test_torch_save_file_and_save_model_record_digests(tmp_path):
    torch = pytest.importorskip("torch")
    from lazystore.torch import load_file, save_file, save_model

    tensors = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}
    save_file(tensors, tmp_path / "t.lzy", digest="sha256")
    assert algorithm(tmp_path / "t.lzy") == "sha256"
    assert torch.equal(load_file(tmp_path / "t.lzy")["w"], tensors["w"])
    model = torch.nn.Linear(4, 2)
    save_model(model, tmp_path / "m.lzy", digest="blake3")
    assert algorithm(tmp_path / "m.lzy") == "blake3"
    with pytest.raises(ls.InvalidInputError, match="digest must be"):
        save_file(tensors, tmp_path / "x.lzy", digest="md5")


# -- CheckpointManager ----------------------------------------------------------------------------


def test_a_manager_records_digests_in_every_file_its_delta_rewrites_included(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, digest="blake3")
    for step in range(4):
        mgr.save(step, state(step))
    deltas = 0
    for step in mgr.steps():
        assert algorithm(mgr.path(step)) == "blake3"
        with ls.open(mgr.path(step)) as ck:
            assert ck.verify() == []
            deltas += ck.base is not None
    assert deltas >= 2  # the older steps were rewritten as deltas against newer ones, with digests
    for step in mgr.steps():
        assert mgr.restore(step)["w"].tobytes() == state(step)["w"].tobytes()
    mgr.close()


def test_a_manager_refuses_an_unknown_digest_at_once(tmp_path):
    with pytest.raises(ls.InvalidInputError, match="digest must be"):
        ls.CheckpointManager(tmp_path, digest="crc32")


def test_a_manager_without_digest_rewrites_a_digest_file_without_them(tmp_path):
    # The member belongs to the writer: a rewrite never copies one over records that lack digests.
    ls.CheckpointManager(tmp_path, digest="sha256").save(0, state(0))
    mgr = ls.CheckpointManager(tmp_path, delta=True)
    mgr.save(1, state(1))
    assert algorithm(mgr.path(1)) is None
    with ls.open(mgr.path(0)) as ck:
        assert ck.base is not None and digest_of(ck) is None and ck.verify() == []
    mgr.close()


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture
def digest_model(tmp_path):
    path = tmp_path / "model.lzy"
    ls.save(state(), path, compression="zstd", digest="blake3")
    return path


def test_convert_adds_digests(capsys, tmp_path):
    ls.save(state(), tmp_path / "plain.lzy")
    code, _, err = run(capsys, "convert", tmp_path / "plain.lzy", tmp_path / "d.lzy", "--digest", "sha256")
    assert code == 0, err
    assert algorithm(tmp_path / "plain.lzy") is None and algorithm(tmp_path / "d.lzy") == "sha256"
    assert ls.load(tmp_path / "d.lzy")["frozen"].tobytes() == state()["frozen"].tobytes()


def test_convert_keeps_the_input_digests_unless_told(capsys, tmp_path, digest_model):
    assert run(capsys, "convert", digest_model, tmp_path / "kept.lzy")[0] == 0
    assert algorithm(tmp_path / "kept.lzy") == "blake3"
    assert run(capsys, "convert", digest_model, tmp_path / "other.lzy", "--digest", "sha256")[0] == 0
    assert algorithm(tmp_path / "other.lzy") == "sha256"
    assert run(capsys, "convert", digest_model, tmp_path / "none.lzy", "--digest", "none")[0] == 0
    assert algorithm(tmp_path / "none.lzy") is None
    data = (tmp_path / "none.lzy").read_bytes()
    assert data[8:12] == b"\x01\x00\x00\x00"  # no digests: 1.0, as any file of these tensors
    assert run(capsys, "convert", digest_model, tmp_path / "shards", "--max-shard-size", "10KB")[0] == 0
    assert algorithm(tmp_path / "shards") == "blake3"


def test_convert_to_safetensors_drops_digests_and_refuses_to_add_them(capsys, tmp_path, digest_model):
    assert run(capsys, "convert", digest_model, tmp_path / "m.safetensors")[0] == 0
    with ls.open(tmp_path / "m.safetensors") as ck:
        assert DIGEST_KEY not in ck.system_metadata
    code, _, err = run(capsys, "convert", digest_model, tmp_path / "n.safetensors", "--digest", "sha256")
    assert code == 2 and "only a lazystore file holds" in err
    assert_one_error_line(err)


def test_merge_keeps_the_first_input_digests(capsys, tmp_path, digest_model):
    ls.save({"extra": np.ones(3)}, tmp_path / "plain.lzy")
    assert run(capsys, "merge", tmp_path / "out.lzy", tmp_path / "plain.lzy", digest_model)[0] == 0
    assert algorithm(tmp_path / "out.lzy") == "blake3"
    assert run(capsys, "merge", tmp_path / "no.lzy", tmp_path / "plain.lzy", digest_model, "--digest", "none")[0] == 0
    assert algorithm(tmp_path / "no.lzy") is None


def test_info_names_the_digest_algorithm(capsys, tmp_path, digest_model):
    code, out, _ = run(capsys, "info", digest_model)
    assert code == 0 and "digests:      blake3" in out
    code, out, _ = run(capsys, "info", digest_model, "--json")
    assert json.loads(out)["digest"] == "blake3"
    ls.save(state(), tmp_path / "plain.lzy")
    code, out, _ = run(capsys, "info", tmp_path / "plain.lzy")
    assert "digests:      none (xxh3 checksums only)" in out


def test_verify_of_a_tampered_digest_file_names_the_tensor(capsys, tmp_path, digest_model):
    from tests._native.test_digests import parts_of, rebuilt

    p = parts_of(digest_model)
    p.chunks["digest"][0][0] ^= 1
    rebuilt(p, tmp_path / "bad.lzy", 4)
    code, out, _ = run(capsys, "verify", tmp_path / "bad.lzy")
    assert code == 1 and "w" in out


def test_to_lazystore_writes_digests_only_when_asked(tmp_path, digest_model):
    from lazystore.interop import to_lazystore

    to_lazystore(digest_model, tmp_path / "plain.lzy")
    with ls.open(digest_model) as ck:
        to_lazystore(ck, tmp_path / "asked.lzy", digest=digest_of(ck))
    assert algorithm(tmp_path / "plain.lzy") is None and algorithm(tmp_path / "asked.lzy") == "blake3"
