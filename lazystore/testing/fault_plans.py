"""What a :class:`~lazystore.testing.rangeserver.RangeServer` request can get
instead of a proper answer (:data:`FAULTS`), the record of a request
(:class:`Request`), and the plans that pick a fault for each request:
:class:`Every` faults every k-th request (or the first n);
:class:`RandomFaults` draws faults from a seed and the request itself
(method, path, range and attempt), never from arrival order, so the same
seed gives the same faults even when requests arrive concurrently.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["FAULTS", "Every", "Fault", "RandomFaults", "Request", "request_rng"]

# What a request can get instead of a proper answer. HEAD requests heed only
# "error", "reset" and "swap"; the others answer a HEAD properly.
FAULTS = (
    "cut",  # send the headers (Content-Length: all of it) and half the body, then close the connection
    "short",  # a well-formed answer of half the bytes asked for
    "stall",  # send the headers and half the body, then go silent (up to stall_seconds)
    "whole",  # ignore Range: 200 with the whole object
    "shifted",  # 206 with another range (one byte further on, or back at the end), its Content-Range honest
    "error",  # an error status: 503 Service Unavailable unless the Fault says otherwise
    "reset",  # reset the connection (TCP RST) instead of answering
    "flip",  # the right answer, but one byte of the body flipped (xor 0xff) in transit
    "swap",  # the object is replaced by Fault.data, then the request answered from the new bytes
)


@dataclass(frozen=True)
class Fault:
    """One request's fault, with its details.

    Attributes
    ----------
    kind : str
        One of :data:`FAULTS`.
    status : int
        "error": the status sent (503 by default).
    retry_after : int or None
        "error": a Retry-After header, in seconds.
    at : int or None
        "flip": the body byte flipped (default: drawn from the server's seed).
    data : bytes or None
        "swap": the object's new bytes.

    Raises
    ------
    ValueError
        An unknown ``kind``, or a swap without ``data``.
    """

    kind: str
    status: int = 503
    retry_after: int | None = None
    at: int | None = None
    data: bytes | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULTS:
            raise ValueError(f"unknown fault {self.kind!r}; expected one of {FAULTS}")
        if self.kind == "swap" and self.data is None:
            raise ValueError("a swap needs the new bytes (data=...)")


@dataclass
class Request:
    """One request the server received, and what it answered.

    Attributes
    ----------
    method : str
        "GET" or "HEAD".
    path : str
        The path asked for.
    start, stop : int or None
        The range asked for, [start, stop); None without Range.
    status : int
        The status answered.
    sent : int
        The body bytes written.
    fault : str or None
        The kind of fault it got.
    attempt : int
        1 + how many earlier requests asked for the same method, path and range.
    flipped : int or None
        "flip": the offset (in the object) of the byte flipped.
    """

    method: str
    path: str
    start: int | None
    stop: int | None
    status: int = 0
    sent: int = 0
    fault: str | None = None
    attempt: int = 1
    flipped: int | None = None


class Every:
    """A plan: ``fault`` for every ``k``-th request of ``method``.

    The k-th, 2k-th, ... request gets it, at most ``limit`` times;
    ``Every(1, f, limit=n)`` faults the first n. Counts in arrival order:
    deterministic for requests sent one at a time.

    Parameters
    ----------
    k : int
        Fault every k-th request.
    fault : str or Fault
        The fault: a kind of :data:`FAULTS`, or a :class:`Fault`.
    limit : int, optional
        The most requests faulted; None: no limit.
    method : str or None, optional
        The method of the requests counted ("GET"); None: any method.
    """

    def __init__(self, k: int, fault: str | Fault, *, limit: int | None = None, method: str | None = "GET") -> None:
        self.k, self.fault, self.limit, self.method = k, fault, limit, method
        self.seen = self.hits = 0

    def __call__(self, request: Request) -> str | Fault | None:
        if self.method is not None and request.method != self.method:
            return None
        self.seen += 1
        if self.seen % self.k or (self.limit is not None and self.hits >= self.limit):
            return None
        self.hits += 1
        return self.fault


class RandomFaults:
    """A seeded plan: a request of ``methods`` gets one of ``kinds`` with probability ``rate``.

    The draw is from the seed and the request's method, path, range and
    attempt alone (not arrival order), so a seed always gives the same
    faults.

    Parameters
    ----------
    seed : int
        The seed.
    rate : float, optional
        The probability that a request gets a fault.
    kinds : iterable of str, optional
        The kinds of fault drawn from (:attr:`KINDS` by default).
    methods : iterable of str, optional
        The methods of the requests that may get one ("GET").
    """

    KINDS = ("error", "cut", "short", "whole", "shifted", "reset", "flip")

    def __init__(self, seed: int, rate: float = 0.3, kinds: Iterable[str] = KINDS, *,
                 methods: Iterable[str] = ("GET",)) -> None:
        self.seed, self.rate, self.kinds, self.methods = seed, rate, tuple(kinds), tuple(methods)

    def __call__(self, request: Request) -> str | None:
        if request.method not in self.methods:
            return None
        rng = request_rng(self.seed, request)
        return rng.choice(self.kinds) if rng.random() < self.rate else None


def request_rng(seed: int, request: Request) -> random.Random:
    """A generator seeded by ``seed`` and the request's method, path, range and attempt.

    The same request always draws the same numbers.

    Parameters
    ----------
    seed : int
        The plan's or the server's seed.
    request : Request
        The request.

    Returns
    -------
    random.Random
        The generator.
    """
    return random.Random(f"{seed}:{request.method}:{request.path}:{request.start}:{request.stop}:{request.attempt}")
