"""``python -m benchmarks.trust [--quick] [--reps N]``: what trusted
checkpoints cost (issue 28), every case side by side in one run.

- **Save with digests**: ``ls.save`` of 512 MiB of float32 (16 tensors of
  32 MiB) without a digest, with ``digest="blake3"`` and with
  ``digest="sha256"``, into the page cache (durable saves: fsync'd).
- **Sign and lazy verify** of a 1 GiB file (32 tensors of 32 MiB, the
  "layers"): the time of each, and the bytes the lazy verify read through
  ``read()`` calls (``rchar`` of /proc/self/io), against the file's size.
- **One layer of 32**: ``ls.load(path, [layer])`` of a signed file opened
  with ``public_key=`` (the signature, then BLAKE3 of the layer's chunks)
  against the unsigned verified load of the same layer (xxh3), with the
  page cache warm, and cold (both files evicted before every call). Cold,
  the bytes the load read from storage (``read_bytes``) are shown too.
- **Full verified load** of the same files, signed against unsigned.
- **Encrypted load of all-MiniLM-L6-v2** (the real trained weights), raw
  and zstd: ``ls.load`` with ``encryption_key=`` against ``ls.load`` of
  the same tensors saved without, both checked (the default).
- **get_slice of 10 rows** of a 1 GiB float32 tensor, encrypted against
  plain: the time, and how many chunks were decrypted (counted at the
  AEAD's open).

Figures are medians of interleaved rounds (``timing.compare``); quote the
ratios, not the absolute times. Not part of ``python -m benchmarks``:
``--quick`` (64 MiB files, 2 reps) is run by the suite's slow tier so this
script cannot rot.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import lazystore as ls
import lazystore.signing

from . import anchors, report, workloads
from .measures import Result, Target, timed
from .timing import compare

KEY = bytes(range(32))  # a benchmark key: the figures do not depend on it
LAYERS = 32


def _io() -> dict[str, int]:
    """This process's I/O counters: rchar (bytes through read calls, page
    cache included) and read_bytes (bytes fetched from storage)."""
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


def _read_by(call) -> tuple[int, int]:
    """(rchar, read_bytes) that ``call()`` read."""
    before = _io()
    call()
    after = _io()
    return after["rchar"] - before["rchar"], after["read_bytes"] - before["read_bytes"]




def _tensors(total: int, count: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    n = total // count // 4
    return {f"layers.{i}.weight": rng.standard_normal(n, dtype=np.float32).reshape(-1, 1024) for i in range(count)}


def _keys(folder: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    pem, pub = folder / "bench.pem", folder / "bench.pub.pem"
    pem.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    pub.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    return pem, pub


def save_digests(folder: Path, total: int, reps: int) -> list[Result]:
    tensors = _tensors(total, 16)
    out = folder / "save.lzy"
    cases = {
        "no digest": lambda: ls.save(tensors, out),
        "digest=blake3": lambda: ls.save(tensors, out, digest="blake3"),
        "digest=sha256": lambda: ls.save(tensors, out, digest="sha256"),
    }
    t = compare(cases, reps=reps, setup=lambda: out.unlink(missing_ok=True))
    out.unlink(missing_ok=True)
    return [
        timed("save_blake3", f"save {total >> 20} MiB with BLAKE3 digests", t, "digest=blake3", "no digest",
              target=Target("<=", 1.15, "ratio"), nbytes=total),
        timed("save_sha256", f"save {total >> 20} MiB with SHA-256 digests", t, "digest=sha256", "no digest",
              nbytes=total, group="trust"),
    ]


def signed_reads(folder: Path, total: int, reps: int) -> list[Result]:
    tensors = _tensors(total, LAYERS)
    plain, signed = folder / "plain.lzy", folder / "signed.lzy"
    ls.save(tensors, plain)
    ls.save(tensors, signed, digest="blake3")
    del tensors
    pem, pub = _keys(folder)
    size = signed.stat().st_size
    rows = []

    t = compare({"sign": lambda: lazystore.signing.sign(signed, pem),
                 "lazy verify": lambda: lazystore.signing.verify(signed, pub, lazy=True),
                 "full verify": lambda: lazystore.signing.verify(signed, pub)}, reps=reps)
    rchar, _ = _read_by(lambda: lazystore.signing.verify(signed, pub, lazy=True))
    rows.append(timed("sign", f"sign a {size >> 20} MiB file (whole-file SHA-256 for model_signing)", t, "sign",
                      group="trust"))
    rows.append(timed("lazy_verify", f"lazy verify: the signature and the index (read {rchar:,} bytes of "
                      f"{size:,})", t, "lazy verify", group="trust"))
    rows.append(timed("full_verify", "full verify: every chunk's digest", t, "full verify",
                      nbytes=size, group="trust"))

    layer = f"layers.{LAYERS // 2}.weight"
    one = {"signed": lambda: ls.load(signed, [layer], public_key=pub),
           "unsigned": lambda: ls.load(plain, [layer])}
    warm = compare(one, reps=reps)
    rows.append(timed("layer_warm", f"one layer of {LAYERS} from a signed file, warm cache",
                      warm, "signed", "unsigned", target=Target("<=", 1.2, "ratio")))
    cold = compare(one, reps=reps, setup=lambda: anchors.evict(plain, signed))
    anchors.evict(plain, signed)
    _, fetched = _read_by(one["signed"])
    rows.append(timed("layer_cold", f"one layer of {LAYERS} from a signed file, cold cache", cold, "signed",
                      "unsigned", target=Target("<=", 1.2, "ratio"),
                      note=f"read {fetched >> 20} MiB from storage for a {size // LAYERS >> 20} MiB layer "
                           f"of a {size >> 20} MiB file (the kernel reads ahead around each mapped page)"))
    full = compare({"signed": lambda: ls.load(signed, public_key=pub), "unsigned": lambda: ls.load(plain)},
                   reps=reps)
    rows.append(timed("full_load", "full verified load, warm: signed (BLAKE3) vs unsigned (xxh3)", full,
                      "signed", "unsigned", nbytes=size, group="trust"))
    return rows


def _load_copied(path):
    """A checked load that reads every tensor into memory (no mapping)."""
    with ls.open(path, mmap=False) as ck:
        return ck.load()


def encrypted_minilm(folder: Path, reps: int, limit: int | None) -> list[Result]:
    tensors = workloads.minilm(limit)
    nbytes = sum(a.nbytes for a in tensors.values())
    rows = []
    for compression in (None, "zstd"):
        label = compression or "raw"
        plain, sealed = folder / f"minilm-{label}.lzy", folder / f"minilm-{label}-sealed.lzy"
        ls.save(tensors, plain, compression=compression)
        ls.save(tensors, sealed, compression=compression, encryption_key=KEY)
        cases = {"encrypted": lambda s=sealed: ls.load(s, encryption_key=KEY),
                 "plain": lambda p=plain: ls.load(p),
                 "plain, copied": lambda p=plain: _load_copied(p)}
        t = compare(cases, reps=reps)
        rows.append(timed(f"minilm_encrypted_{label}", f"ls.load of MiniLM ({label}), encrypted", t,
                          "encrypted", "plain", target=Target("<=", 1.3, "ratio"), nbytes=nbytes))
        if compression is None:  # the plain raw load maps the file: it copies nothing
            rows.append(timed("minilm_encrypted_raw_copied", "ls.load of MiniLM (raw), encrypted vs a plain "
                              "load that reads into memory (mmap=False)", t, "encrypted", "plain, copied",
                              nbytes=nbytes, group="trust"))
    return rows


def _count_opens(call) -> int:
    """How many chunks ``call()`` decrypted (counted at the AEAD's open)."""
    from lazystore._core import aead

    real, count = aead.Opener.open_into, [0]

    def counting(self, *args, **kwargs):
        count[0] += 1
        return real(self, *args, **kwargs)

    aead.Opener.open_into = counting  # type: ignore[method-assign]
    try:
        call()
    finally:
        aead.Opener.open_into = real  # type: ignore[method-assign]
    return count[0]


def encrypted_slice(folder: Path, total: int, reps: int) -> list[Result]:
    rows_of = total // 4 // 4096
    big = np.random.default_rng(1).standard_normal((rows_of, 4096), dtype=np.float32)
    plain, sealed = folder / "big.lzy", folder / "big-sealed.lzy"
    ls.save({"w": big}, plain)
    ls.save({"w": big}, sealed, encryption_key=KEY)
    del big

    def rows10(path, **key):
        with ls.open(path, **key) as ck:
            return ck.get_slice("w")[rows_of // 2 : rows_of // 2 + 10]

    t = compare({"encrypted": lambda: rows10(sealed, encryption_key=KEY), "plain": lambda: rows10(plain)},
                reps=reps)
    opened = _count_opens(lambda: rows10(sealed, encryption_key=KEY))
    with ls.open(sealed, encryption_key=KEY) as ck:
        chunks = ck.info("w").chunk_count
    return [timed("slice_encrypted", f"get_slice of 10 rows of a {total >> 20} MiB tensor (decrypted {opened} of "
                  f"{chunks} chunks)", t, "encrypted", "plain", group="trust")]


def run(folder: Path, quick: bool, reps: int, log) -> list[Result]:
    mib = 1 << 20
    rows = []
    log("save with digests")
    rows += save_digests(folder, (32 if quick else 512) * mib, reps)
    log("sign, verify, signed loads")
    rows += signed_reads(folder, (64 if quick else 1024) * mib, reps)
    log("encrypted MiniLM")
    rows += encrypted_minilm(folder, reps, 40 if quick else None)
    log("encrypted get_slice")
    rows += encrypted_slice(folder, (64 if quick else 1024) * mib, reps)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trust", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small files (32-64 MiB), 2 rounds: a smoke run")
    parser.add_argument("--reps", type=int, default=None, help="rounds per case (default 5; quick 2)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the temporary files go")
    args = parser.parse_args(argv)
    reps = args.reps or (2 if args.quick else 5)

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lazystore-trust-", dir=args.workdir) as tmp:
        rows = run(Path(tmp), args.quick, reps, report.log)
    print(report.table(rows))
    print(f"\n{reps} interleaved rounds per case, medians; {time.perf_counter() - start:.0f} s; "
          f"machine: {json.dumps(report.machine())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
