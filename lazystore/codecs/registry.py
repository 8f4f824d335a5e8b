"""The codecs by id (as the index records them) and by ``compression=`` argument."""

from __future__ import annotations

from collections.abc import Callable

from lazystore.codecs.base import Codec, CodecBase
from lazystore.codecs.delta import ContentDeltaPlanes, DeltaPlanes
from lazystore.codecs.float_planes import FloatPlanes
from lazystore.codecs.raw import RAW
from lazystore.codecs.sealed import SEALED_CODECS
from lazystore.codecs.zstd import ZstdPlanes, check_level
from lazystore.errors import InvalidInputError

CODECS_BY_ID: dict[int, CodecBase] = {RAW.id: RAW, ZstdPlanes.id: ZstdPlanes(), DeltaPlanes.id: DeltaPlanes(),
                                  ContentDeltaPlanes.id: ContentDeltaPlanes(), FloatPlanes.id: FloatPlanes(),
                                  **SEALED_CODECS}
# The names ``compression=`` takes, and their codecs at a zstd level.
# "auto" is lazystore's recommendation, resolved per tensor by the codec's
# ``for_dtype``: today that is codec 4 for a dtype with a float layout and
# codec 1 for the rest, which is what "huffman" does. It is a name, not a
# codec: a file records the codec each tensor used ("huffman" or "zstd").
_BY_NAME: dict[str, Callable[..., Codec]] = {"zstd": ZstdPlanes, "huffman": FloatPlanes, "auto": FloatPlanes}
# How an unknown name's error lists the choices.
CHOICES = ", ".join(["None", *map(repr, _BY_NAME)][:-1]) + f" or {list(_BY_NAME)[-1]!r}"


def codec_for(compression: str | Codec | None, level: int | None = None) -> Codec:
    """The codec for a ``compression=`` argument.

    ``level`` is checked whatever the compression: a writer's per-tensor
    ``compression="zstd"`` would use it later, after bytes were written.

    Parameters
    ----------
    compression : str, Codec or None
        None (or "none"), "zstd", "huffman" (float planes with a
        Huffman-coded exponent, format 1.5; a tensor of a dtype without a
        float layout, an integer buffer say, is stored as "zstd"), "auto"
        (lazystore's recommended codec per tensor: today "huffman" for
        float16, bfloat16, float32 and the 8-bit floats, "zstd" for the
        rest), or a Codec, returned as it is.
    level : int or None, optional
        The zstd level; None tunes it per dtype.

    Returns
    -------
    Codec
        The codec.

    Raises
    ------
    InvalidInputError
        An unknown ``compression``, or a ``level`` that is not zstd's.
    """
    check_level(level)
    if compression is None or compression == "none":
        return RAW
    if isinstance(compression, Codec):
        return compression
    if isinstance(compression, str) and compression in _BY_NAME:
        return _BY_NAME[compression](level=level)
    raise InvalidInputError(f"unknown compression {compression!r}; use {CHOICES}")
