"""The manager's entry in each checkpoint: its step and metrics.

A manager records them in the file itself (the reserved metadata member
``__lazystore_manager__``), so the history is rebuilt from the files alone.
This module checks what a caller gives (steps, metrics, counts) and
encodes and decodes the entry.
"""

from __future__ import annotations

import numbers
import operator
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lazystore import api
from lazystore.errors import FormatError, InvalidInputError
from lazystore.views import tree

MANAGER_KEY = "__lazystore_manager__"
MANAGER_VERSION = 1


def encode(step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The entry of checkpoint ``step``, its metrics checked already."""
    return {"version": MANAGER_VERSION, "step": step,
            "metrics": {name: tree.encode_scalar(value) for name, value in metrics.items()}}


def count(name: str, value: Any) -> int | None:
    """A count argument (``keep_last=``, ``delta_depth=``, ...): None, or an int of at least 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidInputError(f"{name} must be None or an int >= 1, got {value!r}")
    return int(value)


def step_number(step: Any) -> int:
    """A step argument as an int of at least 0 (numpy integers too; never a bool)."""
    if isinstance(step, (bool, np.bool_)):
        raise InvalidInputError(f"step must be an int >= 0, got {step!r}")
    try:
        step = operator.index(step)
    except TypeError:
        raise InvalidInputError(f"step must be an int >= 0, got {step!r}") from None
    if step < 0:
        raise InvalidInputError(f"step must be an int >= 0, got {step}")
    return step


def checked_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """A ``metrics=`` argument as a dict of str names to Python ints and floats."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise InvalidInputError(f"metrics must be a mapping of names to numbers, got {type(metrics).__name__}")
    out = {}
    for name, value in metrics.items():
        if not isinstance(name, str):
            raise InvalidInputError(f"metric names must be str, got {name!r}")
        out[name] = _number(name, value)
    return out


def _number(name: str, value: Any) -> int | float:
    """A metric's value as a Python int or float (numpy scalars, one-element arrays and tensors too)."""
    if hasattr(value, "item") and not isinstance(value, (bool, int, float)):
        try:
            value = value.item()  # numpy scalars, one-element arrays and tensors
        except (ValueError, RuntimeError, TypeError):
            pass
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidInputError(f"metric {name!r} must be a real number, got {value!r}")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _decode_entry(entry: Any, path: Path) -> dict[str, Any]:
    """The metrics of a manager entry read from ``path`` (FormatError if it is corrupt)."""
    if entry is None:
        return {}  # a lazystore file not written by a manager: no metrics
    if not isinstance(entry, dict) or not isinstance(entry.get("metrics"), dict):
        raise FormatError(f"corrupt {MANAGER_KEY} in {os.fspath(path)}")
    metrics = {}
    for name, node in entry["metrics"].items():
        if not isinstance(node, dict) or node.get("t") not in ("int", "float"):
            raise FormatError(f"corrupt {MANAGER_KEY} in {os.fspath(path)}: metric {name!r}")
        metrics[name] = tree.decode_scalar(node)
    return metrics


def read_metrics(path: Path) -> dict[str, Any]:
    """The metrics a checkpoint file records (in its manager entry)."""
    with api.open(path) as ck:
        return _decode_entry(ck.system_metadata.get(MANAGER_KEY), path)
