"""The scalars of a nested state's tree: None, bool, int, float and str
leaves as JSON nodes, floats as exact text (docs/format.md, section 11.7), so
that every bit of a float, NaN payloads and -0.0 included, survives the JSON.
"""

from __future__ import annotations

import math
import re
import struct
from typing import cast

from lazystore.errors import FormatError
from lazystore.views.tree_types import Node

# The values a tree stores as themselves (exactly these types, not subclasses).
Scalar = None | bool | int | float | str

__all__ = ["decode_scalar", "encode_scalar", "float_text", "parse_float"]


def float_text(x: float) -> str:
    """The exact text of a float, which :func:`parse_float` reads back bit for bit.

    Parameters
    ----------
    x : float
        The float.

    Returns
    -------
    str
        ``float.hex(x)`` ("inf", "-inf", "-0x0.0p+0" included), or for a
        NaN its binary64 bits, "nan:7ff8000000000000" (sign and payload kept).
    """
    if math.isnan(x):
        return "nan:" + struct.pack(">d", x).hex()
    return x.hex()


_HEX_FLOAT = re.compile(r"-?(0[xX](?=\.?[0-9a-fA-F])[0-9a-fA-F]*(\.[0-9a-fA-F]*)?[pP][+-]?[0-9]+|inf)")


def parse_float(text: object) -> float:
    """The float :func:`float_text` wrote as ``text``.

    Parameters
    ----------
    text : object
        A str: a hexadecimal float as ``float.hex()`` writes it, "inf",
        "-inf" or "nan:<16 hex digits>" (a stored node's value, so it is
        checked to be a str).

    Returns
    -------
    float
        The float, every bit of it.

    Raises
    ------
    ValueError
        ``text`` is not a str, not such a text, or overflows a float.
    """
    if not isinstance(text, str):
        raise ValueError(f"float must be a string, got {text!r}")
    if text.startswith("nan:"):
        bits = text[4:]
        if len(bits) != 16 or any(c not in "0123456789abcdef" for c in bits):
            raise ValueError(f"bad NaN bits {text!r}")
        value = struct.unpack(">d", bytes.fromhex(bits))[0]
        if not math.isnan(value):
            raise ValueError(f"{text!r} is not a NaN")
        return value
    if not _HEX_FLOAT.fullmatch(text):
        raise ValueError(f"{text!r} is not a hexadecimal float such as float.hex() writes, "
                         "'inf', '-inf' or 'nan:<16 hex digits>'")
    try:
        return float.fromhex(text)
    except OverflowError:
        raise ValueError(f"{text!r} overflows a float") from None


def encode_scalar(x: object) -> Node | None:
    """The tree node of a scalar, or None if ``x`` is not one.

    Parameters
    ----------
    x : object
        A value; None, bool, int, float and str (exactly those types) are
        scalars.

    Returns
    -------
    dict of str to Any, or None
        ``{"t": type name, "v": value}`` (a float's value as
        :func:`float_text`; None's node has no value), or None.
    """
    t = type(x)
    if x is None:
        return {"t": "none"}
    if t is bool:
        return {"t": "bool", "v": x}
    if t is int:
        return {"t": "int", "v": x}
    if t is float:
        return {"t": "float", "v": float_text(cast(float, x))}
    if t is str:
        return {"t": "str", "v": x}
    return None


def decode_scalar(node: Node) -> Scalar:
    """The scalar a tree node describes.

    Parameters
    ----------
    node : dict
        A node whose ``"t"`` is a scalar type ("none", "bool", "int",
        "float" or "str").

    Returns
    -------
    None or bool or int or float or str
        The scalar.

    Raises
    ------
    FormatError
        The node's value is not of its type, or a float's text is bad.
    """
    t = node["t"]
    if t == "none":
        return None
    v = node.get("v")
    if t == "bool" and type(v) is bool:
        return v
    if t == "int" and type(v) is int:
        return v
    if t == "str" and type(v) is str:
        return v
    if t == "float":
        try:
            return parse_float(v)
        except ValueError as exc:
            raise FormatError(f"corrupt tree: bad float: {exc}") from None
    raise FormatError(f"corrupt tree: {t} node with value {v!r}")
