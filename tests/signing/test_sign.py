"""Signing and verifying a checkpoint through lazystore.signing and ls.open:
what a signature vouches for, and every way one can fail to."""

from __future__ import annotations

import base64
import json
import shutil

import numpy as np
import pytest

import lazystore as ls
from lazystore import signing
from lazystore._core.checksum import digest as xxh3
from lazystore._native import layout as fmt
from lazystore.sources import LocalFile
from tests.paths import DATA
from tests.signing.conftest import PRIVATE, PUBLIC, save_with_digests, write_key_pair


def rewrite_index(path, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` (as long) in the file's index, then make
    every checksum agree again (index xxh3 in the trailer): an edit only a
    signature or a pinned digest can catch."""
    data = bytearray(path.read_bytes())
    t = fmt.decode_trailer(data, len(data))
    index = bytes(data[t.index_offset:t.index_offset + t.index_length])
    assert len(old) == len(new) and index.count(old) == 1
    index = index.replace(old, new)
    path.write_bytes(bytes(data[:t.index_offset]) + index
                     + fmt.encode_trailer(t._replace(index_checksum=xxh3(index))))


def test_a_signed_checkpoint_opens_and_loads_with_its_public_key(signed, tensors):
    assert signed.with_name(signed.name + ".sig").is_file()
    with ls.open(signed, public_key=PUBLIC) as ck:
        for name, arr in tensors.items():
            assert np.array_equal(ck[name], arr)
        assert np.array_equal(ck.get_slice("embed.weight")[3:5], tensors["embed.weight"][3:5])
    loaded = ls.load(signed, public_key=PUBLIC)
    assert all(np.array_equal(loaded[n], tensors[n]) for n in tensors)
    signing.verify(signed, PUBLIC)
    signing.verify(signed, PUBLIC, lazy=True)
    signing.verify(signed, PUBLIC, model_signing=True)


def test_keys_may_be_pem_bytes_or_key_objects(signed):
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    with ls.open(signed, public_key=PUBLIC.read_bytes()) as ck:
        assert len(ck) == 3
    signing.verify(signed, load_pem_public_key(PUBLIC.read_bytes()))


def test_a_stripped_signature_is_refused(signed):
    signed.with_name(signed.name + ".sig").unlink()
    with pytest.raises(ls.SignatureError, match="is not signed"):
        ls.open(signed, public_key=PUBLIC)
    with pytest.raises(ls.SignatureError, match="is not signed"):
        signing.verify(signed, PUBLIC)


def test_a_missing_checkpoint_is_not_found_rather_than_unsigned(tmp_path):
    with pytest.raises(FileNotFoundError):
        ls.open(tmp_path / "missing.lzy", public_key=PUBLIC)


def test_an_unsigned_file_opens_as_before_without_a_key(digested, tensors):
    with ls.open(digested) as ck:
        assert np.array_equal(ck["steps"], tensors["steps"])


def _forge(sig_path, change) -> None:
    bundle = json.loads(sig_path.read_bytes())
    change(bundle["dsseEnvelope"])
    sig_path.write_text(json.dumps(bundle))


def test_a_forged_signature_is_refused(signed):
    sig = signed.with_name(signed.name + ".sig")

    def flip_last_signature_byte(env):
        raw = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
        raw[-1] ^= 1
        env["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()

    _forge(sig, flip_last_signature_byte)
    with pytest.raises(ls.SignatureError, match="not valid for this key"):
        ls.open(signed, public_key=PUBLIC)


def test_a_statement_altered_to_claim_another_index_is_refused(signed):
    """Someone who edits the file and puts its new index digest in the
    statement cannot re-sign it: the signature covers the statement."""
    sig = signed.with_name(signed.name + ".sig")

    def claim_another_index(env):
        statement = json.loads(base64.b64decode(env["payload"]))
        statement["predicate"]["lazystore"]["index_sha256"] = "0" * 64
        env["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()

    _forge(sig, claim_another_index)
    with pytest.raises(ls.SignatureError, match="not valid for this key"):
        ls.open(signed, public_key=PUBLIC)


def test_the_wrong_key_is_refused(signed, tmp_path):
    _, other = write_key_pair(tmp_path)
    with pytest.raises(ls.SignatureError, match="signed with another key"):
        ls.open(signed, public_key=other)
    with pytest.raises(ls.SignatureError, match="signed with another key"):
        ls.load(signed, public_key=other)


def test_the_wrong_key_is_refused_without_a_key_hint_too(signed, tmp_path):
    """The hint only names the key: with it gone, the signature check itself refuses."""
    sig = signed.with_name(signed.name + ".sig")
    bundle = json.loads(sig.read_bytes())
    bundle["verificationMaterial"]["publicKey"]["hint"] = None
    sig.write_text(json.dumps(bundle))
    _, other = write_key_pair(tmp_path)
    with pytest.raises(ls.SignatureError, match="not valid for this key"):
        ls.open(signed, public_key=other)
    with ls.open(signed, public_key=PUBLIC) as ck:
        assert len(ck) == 3


def test_an_index_edited_after_signing_is_refused(tmp_path, tensors):
    path = save_with_digests(tensors, tmp_path / "m.lzy", metadata={"license": "apache"})
    signing.sign(path, PRIVATE)
    rewrite_index(path, b"apache", b"gpl-v3")
    with ls.open(path) as ck:  # every checksum agrees: only the signature can tell
        assert ck.metadata == {"license": "gpl-v3"} and ck.verify() == []
    with pytest.raises(ls.SignatureError, match="index is not the one the signature vouches for"):
        ls.open(path, public_key=PUBLIC)
    with pytest.raises(ls.SignatureError, match="index is not the one"):
        signing.verify(path, PUBLIC, lazy=True)


def test_the_signature_of_another_file_is_refused(signed, tmp_path, tensors):
    other = save_with_digests({**tensors, "extra": np.zeros(3)}, tmp_path / "other.lzy")
    signing.sign(other, PRIVATE)
    with pytest.raises(ls.SignatureError, match="not the file that was signed"):
        ls.open(signed, public_key=PUBLIC, signature=str(other) + ".sig")


def test_the_signature_of_a_same_sized_file_is_refused(tmp_path, tensors):
    a = save_with_digests(tensors, tmp_path / "a.lzy", metadata={"v": "1"})
    b = save_with_digests(tensors, tmp_path / "b.lzy", metadata={"v": "2"})
    assert a.stat().st_size == b.stat().st_size
    signing.sign(b, PRIVATE)
    with pytest.raises(ls.SignatureError, match="index is not the one"):
        ls.open(a, public_key=PUBLIC, signature=str(b) + ".sig")


def test_a_file_without_digests_cannot_be_signed(tmp_path, tensors):
    path = tmp_path / "plain.lzy"
    ls.save(tensors, path)
    with pytest.raises(ls.InvalidInputError, match="lazystore convert FILE OUT --digest blake3"):
        signing.sign(path, PRIVATE)
    assert not (tmp_path / "plain.lzy.sig").exists()


def test_a_safetensors_file_cannot_be_signed(tmp_path, tensors):
    path = tmp_path / "m.safetensors"
    ls.save(tensors, path)
    with pytest.raises(ls.InvalidInputError, match="--digest blake3"):
        signing.sign(path, PRIVATE)


def test_a_format_1_2_delta_cannot_be_signed(tmp_path):
    for name in ("golden_v1_2.lzy", "golden_v1_2_base.lzy"):
        shutil.copy(DATA / name, tmp_path / name)
    with pytest.raises(ls.InvalidInputError, match="format 1.2 delta"):
        signing.sign(tmp_path / "golden_v1_2.lzy", PRIVATE)


def test_an_ed25519_key_signs_and_verifies_with_lazystore(tmp_path, digested, tensors):
    private, public = write_key_pair(tmp_path, "ed25519")
    signing.sign(digested, private)
    with ls.open(digested, public_key=public) as ck:
        assert np.array_equal(ck["steps"], tensors["steps"])
    with pytest.raises(ls.SignatureError, match="signed with another key"):
        ls.open(digested, public_key=PUBLIC)


@pytest.mark.parametrize("curve", ["p384", "p521"])
def test_other_nist_curves_sign_and_verify(tmp_path, digested, curve):
    private, public = write_key_pair(tmp_path, curve)
    signing.sign(digested, private)
    signing.verify(digested, public)


def test_ecdsa_signatures_are_deterministic(digested, tmp_path):
    first = signing.sign(digested, PRIVATE, signature=tmp_path / "1.sig")
    second = signing.sign(digested, PRIVATE, signature=tmp_path / "2.sig")
    assert first.read_bytes() == second.read_bytes()


def test_an_encrypted_private_key_takes_its_password_from_the_environment(tmp_path, digested, monkeypatch):
    from cryptography.hazmat.primitives import serialization as s

    key = s.load_pem_private_key(PRIVATE.read_bytes(), None)
    locked = tmp_path / "locked.pem"
    locked.write_bytes(key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8,
                                         s.BestAvailableEncryption(b"correct horse")))
    monkeypatch.delenv("LAZYSTORE_KEY_PASSWORD", raising=False)
    with pytest.raises(ls.InvalidInputError, match="is encrypted: set LAZYSTORE_KEY_PASSWORD"):
        signing.sign(digested, locked)
    monkeypatch.setenv("LAZYSTORE_KEY_PASSWORD", "wrong")
    with pytest.raises(ls.InvalidInputError, match="wrong LAZYSTORE_KEY_PASSWORD"):
        signing.sign(digested, locked)
    monkeypatch.setenv("LAZYSTORE_KEY_PASSWORD", "correct horse")
    signing.sign(digested, locked)
    signing.verify(digested, PUBLIC)


def test_a_key_of_the_wrong_kind_is_refused(tmp_path, digested):
    with pytest.raises(ls.InvalidInputError, match="not a PEM private key"):
        signing.sign(digested, PUBLIC)
    with pytest.raises(ls.InvalidInputError, match="not a PEM public key"):
        ls.open(digested, public_key=PRIVATE)
    with pytest.raises(ls.InvalidInputError, match="no such file"):
        ls.open(digested, public_key=tmp_path / "missing.pem")


def test_a_signature_that_is_not_a_bundle_is_refused(signed):
    signed.with_name(signed.name + ".sig").write_bytes(b"\x00garbage")
    with pytest.raises(ls.SignatureError, match="not a Sigstore signature bundle"):
        ls.open(signed, public_key=PUBLIC)


def test_lazy_open_reads_only_the_tail(tmp_path, monkeypatch):
    """Opening a signed file checks the signature and the index by reading
    the .sig and the file's tail: not one byte of tensor data."""
    big = {f"layer.{i}": np.full((256, 1024), i, np.float32) for i in range(8)}  # 8 MiB
    path = save_with_digests(big, tmp_path / "big.lzy", chunk_bytes=1 << 20)
    signing.sign(path, PRIVATE)
    reads: list[tuple[str, int, int]] = []
    real = LocalFile.read_into

    def counting(self, offset, out):
        reads.append((self.name, offset, memoryview(out).nbytes))
        return real(self, offset, out)

    monkeypatch.setattr(LocalFile, "read_into", counting)
    size = path.stat().st_size
    with ls.open(path, public_key=PUBLIC, mmap=False) as ck:
        assert len(ck) == 8
        of_file = [(o, n) for name, o, n in reads if name == str(path)]
        assert sum(n for _, n in of_file) <= fmt.TAIL_READ_BYTES
        assert all(o + n == size for o, n in of_file)
        assert {name for name, _, _ in reads} == {str(path), str(path) + ".sig"}
        reads.clear()
        assert np.array_equal(ck.get_slice("layer.3")[:2], big["layer.3"][:2])
        # One chunk of 1 MiB, checked against its digest: still not the file.
        assert sum(n for _, _, n in reads) == 1 << 20
    signing.verify(path, PUBLIC, lazy=True)


def test_a_pinned_index_sha256_opens_like_a_signature(digested, tensors):
    pin = signing.index_sha256(digested)
    assert len(pin) == 64
    with ls.open(digested, index_sha256=pin) as ck:
        assert np.array_equal(ck["steps"], tensors["steps"])
    assert np.array_equal(ls.load(digested, index_sha256=pin.upper())["steps"], tensors["steps"])
    with pytest.raises(ls.SignatureError, match="pinned index_sha256"):
        ls.open(digested, index_sha256="ab" * 32)
    with pytest.raises(ls.InvalidInputError, match="64 hex characters"):
        ls.open(digested, index_sha256="abc")


def test_a_pin_needs_chunk_digests(tmp_path, tensors):
    path = tmp_path / "plain.lzy"
    ls.save(tensors, path)
    with pytest.raises(ls.SignatureError, match="records no chunk digests"):
        ls.open(path, index_sha256=signing.index_sha256(path))


def test_trust_keywords_are_checked(signed):
    with pytest.raises(ls.InvalidInputError, match="not both"):
        ls.open(signed, public_key=PUBLIC, index_sha256="0" * 64)
    with pytest.raises(ls.InvalidInputError, match="give public_key= too"):
        ls.open(signed, signature=str(signed) + ".sig")
    with pytest.raises(ls.InvalidInputError, match="verify=False cannot go with public_key="):
        ls.load(signed, public_key=PUBLIC, verify=False)
    with open(signed, "rb") as f, pytest.raises(ls.InvalidInputError, match="by its path or URL"):
        ls.open(f, public_key=PUBLIC)


def test_a_signed_file_read_from_a_url_fetches_its_signature_there(signed, tensors):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe({"/signed/model.lzy": signed.read_bytes(), "/signed/model.lzy.sig": (signed.parent / "model.lzy.sig")
             .read_bytes()})
    try:
        with ls.open("memory://signed/model.lzy", public_key=PUBLIC) as ck:
            assert np.array_equal(ck["steps"], tensors["steps"])
        fs.rm("/signed/model.lzy.sig")
        with pytest.raises(ls.SignatureError, match="is not signed"):
            ls.open("memory://signed/model.lzy", public_key=PUBLIC)
    finally:
        fs.rm("/signed", recursive=True)


def _flip_byte_of(path, name: str, at: int = 10) -> None:
    """Change one stored byte of tensor ``name``, and nothing else: its
    index (which the signature covers) stays as signed."""
    with ls.open(path) as ck:
        offset = ck.info(name).offset + at
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def test_a_chunk_changed_after_signing_is_refused_when_read(signed, tensors, capsys):
    from lazystore.cli import main

    _flip_byte_of(signed, "embed.weight")
    with ls.open(signed, public_key=PUBLIC) as ck:  # the index is intact: the open succeeds
        assert np.array_equal(ck["steps"], tensors["steps"])
        with pytest.raises(ls.DigestError, match="embed.weight"):
            ck["embed.weight"]
        with pytest.raises(ls.DigestError, match="embed.weight"):
            ck.get_slice("embed.weight")[:1]
    with pytest.raises(ls.DigestError, match="embed.weight"):
        ls.load(signed, public_key=PUBLIC)
    signing.verify(signed, PUBLIC, lazy=True)
    with pytest.raises(ls.SignatureError, match="'embed.weight'"):
        signing.verify(signed, PUBLIC)
    assert main(["verify", str(signed), "--key", str(PUBLIC)]) == 1
    assert "corrupt: embed.weight" in capsys.readouterr().out


def test_a_raw_chunk_changed_after_signing_is_refused_through_the_mapping(tmp_path, tensors):
    path = save_with_digests(tensors, tmp_path / "raw.lzy")
    signing.sign(path, PRIVATE)
    _flip_byte_of(path, "steps", at=5000)
    with ls.open(path, public_key=PUBLIC) as ck:
        assert np.array_equal(ck.get_slice("steps")[:100], tensors["steps"][:100])  # its chunk is intact
        with pytest.raises(ls.DigestError, match="'steps' chunk 1"):
            ck["steps"]


def test_torch_loaders_take_the_signature_keywords(signed, tensors):
    pytest.importorskip("torch")
    from lazystore.torch import load_file, safe_open

    loaded = load_file(signed, public_key=PUBLIC)
    assert np.array_equal(loaded["steps"].numpy(), tensors["steps"])
    with safe_open(signed, "pt", public_key=PUBLIC) as f:
        assert np.array_equal(f.get_tensor("layer.0.bias").numpy(), tensors["layer.0.bias"])
    _, other = write_key_pair(signed.parent)
    with pytest.raises(ls.SignatureError):
        load_file(signed, public_key=other)
    with pytest.raises(ls.SignatureError):
        safe_open(signed, "np", public_key=other)


def test_a_delta_whose_base_was_rewritten_with_the_same_content_still_verifies(tmp_path):
    """A codec-3 delta's signature covers the content it restores to (the
    base digests in its index), not the base file's bytes."""
    base = {"w": np.linspace(0, 1, 4096, dtype=np.float32).reshape(64, 64)}
    new = {"w": base["w"] + np.float32(1e-3) * (np.arange(64 * 64).reshape(64, 64) % 7 == 0)}
    save_with_digests(base, tmp_path / "base.lzy", chunk_bytes=1024)
    delta = save_with_digests(new, tmp_path / "delta.lzy", chunk_bytes=1024, base=tmp_path / "base.lzy")
    with ls.open(delta) as ck:
        assert ck.info("w").compression == "delta"
    signing.sign(delta, PRIVATE)
    # The base rewritten: recompressed, with sha256 digests, the same content.
    ls.save(base, tmp_path / "base.lzy", chunk_bytes=1024, compression="zstd", digest="sha256")
    assert np.array_equal(ls.load(delta, public_key=PUBLIC)["w"], new["w"])
    signing.verify(delta, PUBLIC)
    # A base with other content is refused, though the delta's signature is intact.
    save_with_digests({"w": base["w"] + 1}, tmp_path / "base.lzy", chunk_bytes=1024)
    with pytest.raises(ls.BaseCheckpointError):
        ls.load(delta, public_key=PUBLIC)


def test_a_keyless_sigstore_bundle_is_refused_with_what_verifies_it(signed):
    """Keyless signatures (an OIDC identity's certificate, a transparency
    log entry) need a network to verify: lazystore says so and names the tool."""
    sig = signed.with_name(signed.name + ".sig")
    bundle = json.loads(sig.read_bytes())
    bundle["verificationMaterial"] = {"certificate": {"rawBytes": "MIIB"}, "tlogEntries": [{"logIndex": "1"}]}
    sig.write_text(json.dumps(bundle))
    with pytest.raises(ls.SignatureError, match="keyless .*`model_signing verify sigstore`"):
        ls.open(signed, public_key=PUBLIC)


def test_a_delta_stays_verified_when_the_manager_rewrites_its_base(tmp_path):
    """CheckpointManager(delta=True) rewrites the base of a signed delta as
    a delta itself (same content): the signed delta still verifies."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((64, 64)).astype(np.float32)
    states = {}
    with ls.CheckpointManager(tmp_path / "ckpts", delta=True, digest="blake3") as mgr:
        for step in (1, 2):
            weights = weights.copy()
            weights[step] += 1
            states[step] = weights
            mgr.save(step, {"w": weights})
        first = mgr.path(1)
        with ls.open(first) as ck:
            assert ck.info("w").compression == "delta" and ck.base == str(mgr.path(2))
        signing.sign(first, PRIVATE)
        second_index = signing.index_sha256(mgr.path(2))
        weights = weights.copy()
        weights[3] += 1
        mgr.save(3, {"w": weights})  # step 2 is rewritten as a delta against step 3
        assert signing.index_sha256(mgr.path(2)) != second_index
        with ls.open(mgr.path(2)) as ck:
            assert ck.info("w").compression == "delta"
        assert np.array_equal(ls.load(first, public_key=PUBLIC)["w"], states[1])
        signing.verify(first, PUBLIC)
