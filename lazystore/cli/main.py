"""The ``lazystore`` command line (also ``python -m lazystore``): the argument
parser, and the entry point that turns every failure into an exit code.

A thin layer over the public API: every subcommand opens checkpoints with
:func:`lazystore.open` and writes them with :class:`lazystore.Writer`, so any
input format ``open`` learns to read works here unchanged. The subcommands
are in :mod:`lazystore.cli.commands` and :mod:`lazystore.cli.diff`; output
formats are chosen in one place, :mod:`lazystore.cli.outputs`.

Exit codes: 0 success (``verify``: intact; ``diff``: same), 1 ``verify``:
corrupt / ``diff``: different / ``ls``: no tensor matches the glob, 2 usage
errors and unreadable input, 141 (128 + SIGPIPE) when the reader of standard
output went away (``lazystore ls big.lzy | head``). Expected errors print one
line on stderr, never a traceback.

Everything written passes through :func:`~lazystore.cli.text.escape_controls`:
standard output as a stream (:class:`_Escaped`), so no command can forget it,
and the error line. Tensor names and metadata come from files someone else
made, and an escape sequence in a name must not reach the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys

import lazystore as ls
from lazystore.cli.commands import cmd_convert, cmd_info, cmd_ls, cmd_merge, cmd_verify
from lazystore.cli.diff import cmd_diff
from lazystore.cli.errors import CliError, one_line, os_error
from lazystore.cli.keys import add_key_option
from lazystore.cli.signing import cmd_sign
from lazystore.cli.text import PROG, escape_controls, parse_size

# What a shell reports for a command killed by SIGPIPE, as `cat big | head -1`
# does: the output was cut short, which is neither success nor any of our
# failures. (Python ignores SIGPIPE, so a write raises BrokenPipeError instead.)
BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE


def _size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _level_arg(text: str) -> int:
    try:
        level = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid level {text!r}: not an integer") from None
    if not 1 <= level <= 22:
        raise argparse.ArgumentTypeError(f"invalid level {level}: zstd levels are 1 to 22")
    return level


class _ShowVersion(argparse.Action):
    """``--version``: lazystore's and its format's version, then whether the
    optional C kernels are in use (an install without a compiler decodes
    more slowly, and this is where a user sees it). argparse's own version
    action would re-wrap the two lines into one paragraph."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        kernels = ls.show_config(mode="dicts")["C kernels"]
        print(escape_controls(f"{PROG} {ls.__version__} (format {ls.FORMAT_VERSION})\nC kernels: {kernels}"))
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, check, sign, convert, compare and merge lazystore checkpoints.",
        epilog="Exit codes: 0 success; 1 corrupt (verify), different (diff), no match (ls); 2 errors; "
               "141 standard output closed early. "
               "See docs/cli.md.",
    )
    p.add_argument("--version", action=_ShowVersion, help="show the version, and whether the C kernels are in use")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("info", help="format, version, sizes, compression ratio and metadata of a checkpoint",
                       description="Show a checkpoint's format and version, tensor count, total and stored "
                                   "bytes, compression ratio and metadata. Reads only the index.")
    s.add_argument("path", metavar="PATH")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    add_key_option(s, "authenticates an encrypted checkpoint's index (none is needed to read it)")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("ls", help="list tensors: name, dtype, shape, size, codec",
                       description="List each tensor: name, dtype, shape, size, stored size, codec. "
                                   "Exit code 1 if GLOB matches nothing.")
    s.add_argument("path", metavar="PATH")
    s.add_argument("glob", metavar="GLOB", nargs="?",
                   help="only names matching this shell pattern ('*' also matches '/' and '.')")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    add_key_option(s, "authenticates an encrypted checkpoint's index (none is needed to list it)")
    s.set_defaults(func=cmd_ls)

    s = sub.add_parser("verify", help="check every stored byte against its checksum (or signature)",
                       description="Check the preamble, every chunk and all padding against their "
                                   "checksums, naming every corrupt tensor. With --key, check PATH's "
                                   "signature (PATH.sig, or DIR/model.sig) and the index it vouches for, "
                                   "then every chunk against its digest. "
                                   "Exit codes: 0 intact, 1 corrupt or not vouched for, 2 unreadable.")
    s.add_argument("path", metavar="PATH")
    s.add_argument("--key", metavar="PUBLIC.pem", default=None,
                   help="check the signature made with this public key's private key (PEM)")
    s.add_argument("--signature", metavar="SIG", default=None,
                   help="the signature to check (default: PATH.sig; DIR/model.sig for a folder)")
    s.add_argument("--lazy", action="store_true",
                   help="check the signature and the index only, reading the file's tail (what "
                        "ls.open(path, public_key=...) checks)")
    s.add_argument("--model-signing", action="store_true",
                   help="also recompute every file's SHA-256, as OpenSSF model_signing verifies it")
    add_key_option(s, "also checks every sealed chunk's tag (without it, an encrypted checkpoint's stored bytes "
                      "are checked against their checksums or digests)")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("sign", help="sign a checkpoint: write FILE.sig (a Sigstore bundle)",
                       description="Sign PATH (a lazystore file with chunk digests, or a folder of "
                                   "lazystore shards) with an ECDSA (P-256/384/521) or Ed25519 private key. "
                                   "Writes PATH.sig (DIR/model.sig for a folder), which `lazystore verify "
                                   "--key` and ls.open(path, public_key=...) check by reading the index only, "
                                   "and which OpenSSF model_signing verifies (ECDSA keys). An encrypted key's "
                                   "password is read from LAZYSTORE_KEY_PASSWORD.")
    s.add_argument("path", metavar="PATH")
    s.add_argument("--key", metavar="PRIVATE.pem", required=True, help="the private key (PEM)")
    s.add_argument("--signature", metavar="OUT", default=None,
                   help="where to write the signature (default: PATH.sig; DIR/model.sig for a folder)")
    s.set_defaults(func=cmd_sign)

    def encoding_options(s):
        s.add_argument("--compression", choices=["auto", "zstd", "huffman", "none"], default=None,
                       help="re-encode every tensor: auto (recommended: huffman for floats, zstd for the rest), "
                            "zstd, huffman (floats with a Huffman-coded exponent, format 1.5; other dtypes with "
                            "zstd) or raw (default: keep each tensor's codec)")
        s.add_argument("--level", type=_level_arg, metavar="N", default=None,
                       help="zstd level 1-22 for the zstd tensors and planes (default: tuned per dtype)")
        s.add_argument("--digest", choices=["blake3", "sha256", "none"], default=None,
                       help="record a cryptographic digest of every chunk, checked by verified reads "
                            "(default: keep the input's digests; none: write xxh3 checksums only)")

    s = sub.add_parser("convert", help="convert a checkpoint (re-encode with or without compression)",
                       description="Copy SRC to DST one tensor at a time, keeping metadata and any "
                                   "nested training state. SRC may be lazystore, safetensors, a sharded "
                                   "folder, a torch zip (.pt/.pth/.bin, loaded with weights_only=True), "
                                   ".npz, or a distributed checkpoint folder (torch.distributed.checkpoint, "
                                   "saved by lazystore's or torch's writer), consolidated into one "
                                   "lazystore file. The output format follows DST: .safetensors, a folder (or "
                                   "--max-shard-size) for lazystore shards, lazystore otherwise. "
                                   "Corrupt input stops the copy.")
    s.add_argument("src", metavar="SRC")
    s.add_argument("dst", metavar="DST")
    encoding_options(s)
    s.add_argument("--max-shard-size", type=_size_arg, metavar="SIZE", default=None,
                   help="write DST as a folder of lazystore shards of at most SIZE each (e.g. 500MB, 2GiB) "
                        "plus lazystore.index.json")
    add_key_option(s, "encrypts DST (a lazystore file or folder) and opens SRC if SRC is encrypted")
    s.add_argument("--decrypt", action="store_true",
                   help="write DST unencrypted: the key only opens SRC")
    s.set_defaults(func=cmd_convert)

    s = sub.add_parser("diff", help="compare two checkpoints: keys, dtypes, shapes, values, metadata",
                       description="Report added, removed and changed tensors (dtype or shape), tensors "
                                   "whose values differ (bitwise) with the max abs difference, and "
                                   "metadata differences. Tensors are read in blocks, so memory stays "
                                   "bounded. Exit codes: 0 same, 1 different, 2 unreadable.")
    s.add_argument("a", metavar="A")
    s.add_argument("b", metavar="B")
    s.set_defaults(func=cmd_diff)

    s = sub.add_parser("merge", help="combine checkpoints into one",
                       description="Write the tensors of every input into OUT, one at a time. A name "
                                   "in several inputs is taken from the first (or, with --prefer last, "
                                   "the last) input holding it; metadata keys are merged the same way. "
                                   "Checkpoints of nested training state cannot be merged.")
    s.add_argument("out", metavar="OUT")
    s.add_argument("inputs", metavar="IN", nargs="+")
    s.add_argument("--prefer", choices=["first", "last"], default="first",
                   help="which input wins for a tensor or metadata key found in several (default: first)")
    encoding_options(s)
    s.set_defaults(func=cmd_merge)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line.

    Expected errors print one line on stderr, never a traceback: every
    failure becomes an exit code.

    Parameters
    ----------
    argv : list of str, optional
        The arguments, without the program name (default ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit code: 0 success (``verify``: intact; ``diff``: same), 1
        ``verify``: corrupt, ``diff``: different, ``ls``: no tensor matches
        the glob; 2 usage errors and unreadable input; 130 interrupted; 141
        when the reader of standard output went away.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        with contextlib.redirect_stdout(_Escaped(sys.stdout)):
            code = args.func(args)
            sys.stdout.flush()  # a closed pipe raises here, not at exit
        return code
    except BrokenPipeError:  # `lazystore ls x | head`: the reader has all it wanted
        _silence_stdout()
        return BROKEN_PIPE_EXIT
    except CliError as exc:
        return _fail(str(exc), exc.code)
    except ls.LazyStoreError as exc:
        return _fail(one_line(str(exc)) or type(exc).__name__)
    except OSError as exc:
        return _fail(os_error(exc, None))
    except MemoryError:
        return _fail("out of memory")
    except KeyboardInterrupt:
        return _fail("interrupted", 130)


def _fail(message: str, code: int = 2) -> int:
    label = "error: " if code == 2 else ""  # exit 1 reports a finding (no match), not an error
    print(f"{PROG}: {label}{escape_controls(one_line(message))}", file=sys.stderr)
    return code


class _Escaped:
    """Standard output as the commands see it: every write escaped with
    :func:`escape_controls`; everything else is the real stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(escape_controls(text))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    # The reader has gone: point stdout at /dev/null so the interpreter's
    # final flush at exit does not raise BrokenPipeError again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
