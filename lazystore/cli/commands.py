"""The subcommands that inspect, check and write checkpoints: info, ls,
verify, convert and merge (diff, with its comparison engine, is in
:mod:`lazystore.cli.diff`).

Each ``cmd_*`` takes the parsed arguments, prints its results on stdout and
returns the exit code; failures are raised (see :mod:`lazystore.cli.errors`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping

import lazystore as ls
from lazystore import signing
from lazystore._core import crypto_digest
from lazystore._core.batching import batch_by_bytes
from lazystore.cli.errors import CliError, about
from lazystore.cli.inputs import Tensors, dcp_folder, is_encrypted, open_input
from lazystore.cli.keys import key_from
from lazystore.cli.outputs import open_output, output_format
from lazystore.cli.progress import progress
from lazystore.cli.signing import refuse_options_without_key, verify_signed
from lazystore.cli.text import (
    codec_name,
    dtype_name,
    format_shape,
    human_size,
    one_value,
    plural,
    print_table,
    ratio,
)
from lazystore.interop import carried_metadata, copy, digest_of

# The nested-state marker has no public name: TREE_KEY in system_metadata is
# how ls.load itself tells training state from a flat checkpoint.
from lazystore.views.tree import TREE_KEY

# verify checks tensors in steps of about this many stored bytes, so the
# progress bar moves while each step is still checked in parallel. (Not to be
# confused with chunk_reader.VERIFY_BATCH_BYTES, the size of one pool task.)
PROGRESS_STEP_BYTES = 64 << 20


# -- info and ls: the index only ---------------------------------------------------


def cmd_info(args) -> int:
    with open_input(args.path, encryption_key=key_from(args)) as ck, about(args.path):
        infos = [ck.info(n) for n in ck]
        nbytes, stored = ck.nbytes, ck.stored_nbytes
        codecs: dict[str, int] = {}
        dtypes: dict[str, int] = {}
        for i in infos:
            codecs[codec_name(i.compression)] = codecs.get(codec_name(i.compression), 0) + 1
            dtypes[dtype_name(i.dtype)] = dtypes.get(dtype_name(i.dtype), 0) + 1
        summary = {
            "path": os.fspath(args.path),
            "format": getattr(ck, "format", "lazystore"),
            "format_version": ".".join(str(v) for v in ck.format_version),
            "tensors": len(infos),
            "nbytes": nbytes,
            "stored_nbytes": stored,
            "compression_ratio": ratio(nbytes, stored),
            "codecs": codecs,
            "dtypes": dtypes,
            "nested": TREE_KEY in ck.system_metadata,
            "digest": digest_of(ck),
            "encrypted": any(c.startswith("sealed") for c in codecs),
            "metadata": ck.metadata,
            "system_metadata_keys": sorted(ck.system_metadata),
        }
        if summary["format"] == "lazystore":  # one file: the digest ls.open(path, index_sha256=...) pins
            summary["index_sha256"] = signing.index_sha256(args.path)
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
        return 0
    r = summary["compression_ratio"]
    rows = [
        ("path", summary["path"]),
        ("format", f"{summary['format']} {summary['format_version']}".strip()),
        ("tensors", str(len(infos))),
        ("total size", f"{human_size(nbytes)} ({nbytes:,} bytes)"),
        ("stored size", f"{human_size(stored)} ({stored:,} bytes)"),
        ("compression", _ratio_text(r, codecs)),
        ("dtypes", ", ".join(f"{n} {d}" for d, n in sorted(dtypes.items())) or "-"),
        ("nested state", "yes (ls.load rebuilds the saved structure)" if summary["nested"] else "no"),
        ("digests", summary["digest"] or "none (xxh3 checksums only)"),
        ("encrypted", "yes (tensor bytes; names, shapes and metadata are not)" if summary["encrypted"] else "no"),
    ]
    if "index_sha256" in summary:
        rows.append(("index sha256", summary["index_sha256"]))
    width = max(len(k) for k, _ in rows) + 1
    for key, value in rows:
        print(f"{key + ':':<{width}} {one_value(value)}")
    if summary["metadata"]:
        print("metadata:")
        for line in json.dumps(summary["metadata"], indent=2, ensure_ascii=False).splitlines():
            print("  " + line)
    else:
        print(f"{'metadata:':<{width}} {{}}")
    return 0


def _ratio_text(r: float | None, codecs: dict[str, int]) -> str:
    if r is None:
        return "-"
    counts = ", ".join(f"{n} {c}" for c, n in sorted(codecs.items()))
    return f"{r:.2f}x ({counts})"


def cmd_ls(args) -> int:
    with open_input(args.path, encryption_key=key_from(args)) as ck, about(args.path):
        try:
            view = ck if args.glob is None else ck.select(args.glob)
        except ls.TensorNotFoundError:  # a finding, not an error: exit code 1
            raise CliError(f"no tensor matches {args.glob!r}", code=1) from None
        infos = [view.info(n) for n in view]
    if args.json:
        print(json.dumps([
            {"name": i.name, "dtype": dtype_name(i.dtype), "shape": list(i.shape), "nbytes": i.nbytes,
             "stored_nbytes": i.stored_nbytes, "compression": i.compression}
            for i in infos
        ], indent=2, ensure_ascii=False))
        return 0
    rows = [("NAME", "DTYPE", "SHAPE", "SIZE", "STORED", "CODEC")]
    rows += [(i.name, dtype_name(i.dtype), format_shape(i.shape), human_size(i.nbytes),
              human_size(i.stored_nbytes), codec_name(i.compression)) for i in infos]
    print_table(rows, right={3, 4})
    return 0


# -- verify ----------------------------------------------------------------------------


def cmd_verify(args) -> int:
    if args.key is not None:
        bad, total, intact = verify_signed(args, _verify_all)
    else:
        refuse_options_without_key(args)
        with open_input(args.path, stream=True, encryption_key=key_from(args)) as ck, about(args.path):
            bad, total = _verify_all(ck), len(ck)
            intact = f"OK, {plural(total, 'tensor')} intact"
    for name in bad:
        print(f"corrupt: {one_value(name)}")
    if bad:
        print(f"{one_value(args.path)}: {len(bad)} of {plural(total, 'tensor')} corrupt")
        return 1
    print(f"{one_value(args.path)}: {intact}")
    return 0


def _verify_all(ck) -> list[str]:
    """Every corrupt tensor of an open view, with a progress bar by stored bytes."""
    # A view of no tensors verifies just the preamble (which opening a
    # local file has already checked; other sources check it here).
    ck.select([]).verify()
    names = list(ck)
    bad: list[str] = []
    sizes = {n: ck.info(n).stored_nbytes for n in names}
    steps = batch_by_bytes(names, PROGRESS_STEP_BYTES, size=sizes.__getitem__)
    for batch in progress(steps, desc="verify", total=sum(sizes.values()),
                          weight=lambda b: sum(sizes[n] for n in b)):
        bad += ck.verify(batch)
    return bad


# -- convert and merge: streaming tensors into a writer -------------------------------------


def _check_level(args) -> None:
    # argparse checks each option alone; this pair is refused here, before
    # any file is opened or created.
    if args.level is not None and args.compression == "none":
        raise CliError("--level applies to zstd; it cannot be used with --compression none")


def _copy(sources: Mapping[str, tuple[str, ls.ViewBase]], out, compression: str | None, desc: str) -> None:
    """Stream tensors (name -> (path, view)) into ``out`` through
    :func:`lazystore.interop.copy`, with a progress bar by decoded bytes.
    ``compression`` is ``--compression``: "auto", "zstd", "huffman", "none", or None to keep
    each tensor's own codec, as copy takes it. Every input was opened with
    ``verify=True`` (:func:`open_input`), so its reads check what they copy."""
    tensors = Tensors(sources)
    sizes = {name: tensors.info(name).nbytes for name in tensors}
    names = progress(tensors, desc=desc, total=sum(sizes.values()), weight=sizes.__getitem__)
    copy(tensors, out, compression=compression, names=names, reads_checked=True)


def _stored_size(path) -> str:
    """What convert and merge report of their output: its size on disk."""
    try:
        if os.path.isdir(path):
            size = sum(e.stat().st_size for e in os.scandir(path) if e.is_file())
            return f"{human_size(size)} on disk"
        return f"{human_size(os.path.getsize(path))} on disk"
    except OSError:
        return "written"  # the output is committed; only its size is unknown


def _output_digest(args, views: list, dst) -> str | None:
    """The chunk digests convert and merge write: ``--digest`` (an
    algorithm, or "none"), else the inputs' (the first's that has them),
    where the output can hold them (a lazystore file or folder)."""
    if args.digest is not None:
        return None if args.digest == "none" else args.digest
    kept = next((d for d in map(digest_of, views) if d is not None), None)
    if kept is None or output_format(dst) == "safetensors" or not crypto_digest.known(kept):
        return None
    return kept


def cmd_convert(args) -> int:
    _check_level(args)
    if dcp_folder(args.src):
        return _consolidate(args)
    key = key_from(args)
    # The key opens SRC if it is encrypted, and encrypts DST unless --decrypt.
    with open_input(args.src, verify=True, stream=True,
                    encryption_key=key if key is not None and is_encrypted(args.src) else None) as ck:
        with about(args.src):
            metadata, system_metadata = carried_metadata(ck)
        with open_output(args.dst, metadata=metadata, system_metadata=system_metadata,
                         compression_level=args.level, max_shard_size=args.max_shard_size,
                         digest=_output_digest(args, [ck], args.dst),
                         encryption_key=None if args.decrypt else key) as out, \
                about(args.dst):
            _copy({n: (args.src, ck) for n in ck}, out, args.compression, "convert")
        count, nbytes = len(ck), ck.nbytes
    print(f"{args.dst}: {plural(count, 'tensor')}, {human_size(nbytes)} -> {_stored_size(args.dst)}")
    return 0


def _consolidate(args) -> int:
    """convert of a DCP checkpoint folder: :func:`lazystore.dcp.consolidate`,
    into one lazystore file."""
    if key_from(args) is not None:
        raise CliError(f"{args.src}: a DCP checkpoint is consolidated unencrypted; encrypt the result with a "
                       "second convert")
    if args.max_shard_size is not None or output_format(args.dst) != "lazystore":
        raise CliError(f"{args.dst}: a DCP checkpoint is consolidated into one lazystore file (.lzy); "
                       "--max-shard-size and other output formats are not supported for DCP input")
    from lazystore import dcp  # imports torch: only for DCP input

    with about(args.src):
        done = dcp.consolidate(args.src, args.dst, compression=None if args.compression == "none" else
                               args.compression, compression_level=args.level,
                               digest=_output_digest(args, [], args.dst))
    for fqn, why in done.skipped.items():
        print(f"skipped non-tensor item {one_value(fqn)}: {one_value(why)}")
    kept = f", {plural(len(done.items), 'non-tensor item')} in its metadata" if done.items else ""
    print(f"{args.dst}: {plural(done.tensors, 'tensor')}{kept}, {human_size(done.nbytes)} -> "
          f"{_stored_size(args.dst)}")
    return 0


def _merge_dicts(dicts: list[Mapping], prefer: str) -> dict:
    """One dict from several: a key in several takes its value from the first
    dict holding it (``prefer="first"``) or the last; keys come in order of
    first appearance either way, as merged tensors do."""
    merged: dict = {}
    for d in (dicts if prefer == "last" else reversed(dicts)):
        merged.update(d)
    if prefer == "first":  # keep keys in order of first appearance
        order = {k: None for d in dicts for k in d}
        merged = {k: merged[k] for k in order}
    return merged


def cmd_merge(args) -> int:
    _check_level(args)
    with contextlib.ExitStack() as stack:
        views = [(p, stack.enter_context(open_input(p, verify=True, stream=True))) for p in args.inputs]
        sources: dict[str, tuple[str, ls.ViewBase]] = {}
        duplicates = 0
        # A tree that only wraps a flat dict (a state_dict saved by an older
        # version) is looked through: its file holds the same tensors as a flat one.
        flat = [carried_metadata(ck) for _, ck in views]
        for (path, ck), (_, system) in zip(views, flat):
            with about(path):
                if TREE_KEY in system:
                    raise CliError(f"{path}: holds nested training state, whose structure a merge would "
                                   "break; merge takes flat checkpoints (name -> tensor)")
                for name in ck:
                    if name in sources:
                        duplicates += 1
                        if args.prefer == "first":
                            continue
                    sources[name] = (path, ck)
        metadata = _merge_dicts([meta for meta, _ in flat], args.prefer)
        system_metadata = _merge_dicts([system for _, system in flat], args.prefer)
        with open_output(args.out, metadata=metadata, system_metadata=system_metadata,
                         compression_level=args.level, max_shard_size=None,
                         digest=_output_digest(args, [ck for _, ck in views], args.out)) as out, about(args.out):
            _copy(sources, out, args.compression, "merge")
    note = f", {plural(duplicates, 'duplicate name')} (kept the {args.prefer})" if duplicates else ""
    print(f"{args.out}: {plural(len(sources), 'tensor')} from {plural(len(views), 'input')}{note}, "
          f"{_stored_size(args.out)}")
    return 0
