"""The interfaces the package declares in code: every writer a
TensorWriter, every sink a Sink, a delta codec never taken for a codec
that stores a chunk alone."""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls
from lazystore.codecs import (
    CODECS_BY_ID,
    DELTA_CODEC_IDS,
    SEALED_CODEC_IDS,
    Codec,
    DeltaCodec,
    DeltaPlanes,
    Sealed,
    codec_for,
)
from lazystore.interop.safetensors import SafetensorsWriter
from lazystore.interop.sharded_writer import ShardedWriter
from lazystore.sinks import open_sink
from lazystore.sinks.base import Sink
from lazystore.writing.interface import TensorWriter


@pytest.mark.parametrize("make", [lambda d: ls.Writer(d / "a.lzy"), lambda d: SafetensorsWriter(d / "a.safetensors"),
                                  lambda d: ShardedWriter(d / "shards")], ids=["lazystore", "safetensors", "sharded"])
def test_every_writer_is_a_tensor_writer_and_fills_the_same_way(tmp_path, make):
    with make(tmp_path) as w:
        assert isinstance(w, TensorWriter)
        w.metadata["note"] = "x"
        w.add("a", np.arange(4, dtype=np.float32))
        w.add_pieces("b", [b"\x01\x00", b"\x02\x00"], dtype=np.int16, shape=(2,))
    got = ls.load(w.path)
    assert got["a"].tolist() == [0, 1, 2, 3] and got["b"].tolist() == [1, 2]


def test_a_writer_that_leaves_out_part_of_the_interface_cannot_be_made():
    class Half(TensorWriter):
        def add(self, name, array, *, compression=None):
            pass

    with pytest.raises(TypeError, match="abstract"):
        Half()


def test_every_sink_implements_the_whole_interface(tmp_path):
    sink = open_sink(tmp_path / "s.bin")
    assert isinstance(sink, Sink) and not type(sink).__abstractmethods__
    sink.write_many([b"ab", b"c"])
    sink.commit()
    assert (tmp_path / "s.bin").read_bytes() == b"abc" and sink.closed


def test_delta_codecs_are_their_own_kind():
    for codec_id, codec in CODECS_BY_ID.items():
        kind = DeltaCodec if codec_id in DELTA_CODEC_IDS else Sealed if codec_id in SEALED_CODEC_IDS else Codec
        assert isinstance(codec, kind), codec_id
    assert not isinstance(DeltaPlanes(), Codec)
    with pytest.raises(ls.InvalidInputError, match="unknown compression"):
        codec_for(DeltaPlanes())  # it cannot store a chunk alone
    with pytest.raises(ls.InvalidInputError, match="unknown compression"):
        codec_for(CODECS_BY_ID[128])  # sealing takes a key: encryption_key=, not a codec
