"""HTTP answers to range requests, judged by their headers before the body is read.

fsspec's HTTP filesystem reads an answer's whole body before it looks at
it. A server that ignores ``Range`` (``python -m http.server``, the first
one anyone tries) answers every range with 200 and the whole object, so a
64 KiB read of a 1 GiB object would download the gigabyte and hold it in
memory. :func:`request_options` gives fsspec's requests an aiohttp
middleware that judges each answer as soon as its headers arrive: one that
is not the range asked for raises :class:`~lazystore.sources.ranges.WrongAnswer`
and has its connection closed, the body unread, so the server stops sending.

Client middlewares came with aiohttp 3.12. With an older aiohttp the
options are empty, and a whole object is still refused, by its length,
once it has arrived (FsspecSource._fetch): downloaded once, never again.
"""

from __future__ import annotations

import re

from lazystore.sources.ranges import WrongAnswer, wrong_length

_ASKED = re.compile(r"bytes=(\d+)-(\d+)$")  # the Range header fsspec sends
_GIVEN = re.compile(r"bytes (\d+)-(\d+)/(?:\d+|\*)$")  # a 206's Content-Range


def request_options(fs) -> dict:
    """Keyword arguments for ``fs.cat_file`` and ``fs.cat_ranges`` that make
    a request refuse, at its headers, an answer that is not the range asked
    for; empty for filesystems other than fsspec's HTTP(S) one."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    if not {"http", "https"} & set(protocols) or not aiohttp_has_middlewares():
        return {}
    from fsspec.implementations.http import HTTPFileSystem

    if not isinstance(fs, HTTPFileSystem):
        return {}
    # Middlewares given per request replace the session's: keep the user's
    # (an auth middleware, say), ours outermost so it judges the final answer.
    theirs = fs.kwargs.get("middlewares")
    if theirs is None:
        theirs = fs.client_kwargs.get("middlewares") or ()
    return {"middlewares": (_refuse_wrong_ranges, *theirs)}


def aiohttp_has_middlewares() -> bool:
    import aiohttp

    return hasattr(aiohttp, "ClientMiddlewareType")


async def _refuse_wrong_ranges(request, handler):
    """aiohttp client middleware: the answer, unless it is a 2xx that is not
    the range the request asked for (then WrongAnswer, the connection closed)."""
    response = await handler(request)
    asked = _ASKED.match(request.headers.get("Range", ""))
    if asked is not None and 200 <= response.status < 300:
        wrong = judge(int(asked[1]), int(asked[2]) + 1, response.status, response.headers)
        if wrong is not None:
            response.close()  # drops the connection: the rest of the body is never read
            raise wrong
    return response


def judge(start: int, stop: int, status: int, headers) -> WrongAnswer | None:
    """Why a 2xx answer with ``headers`` to a request for bytes [start, stop)
    cannot be those bytes; None if it may be (its length is checked again
    once it is read)."""
    length = headers.get("Content-Length", "")
    encoding = headers.get("Content-Encoding", "identity").strip().lower()
    # A compressed body's length says nothing of the bytes it holds.
    length = int(length) if length.isdigit() and encoding in ("", "identity") else None
    if status != 206:
        if start == 0 and length == stop:
            return None  # the whole object is the range asked for: RFC 9110 allows a 200
        size = "" if length is None else f" ({length} bytes)"
        return WrongAnswer(f"status {status} and the whole object{size} came back for a request of "
                           f"bytes {start}-{stop}", range_ignored=True)
    given = _GIVEN.match(headers.get("Content-Range", "").strip())
    if given is not None and (int(given[1]), int(given[2]) + 1) != (start, stop):
        return WrongAnswer(f"bytes {given[1]}-{int(given[2]) + 1} came back for a request of bytes {start}-{stop}")
    if length is not None and length != stop - start:
        return wrong_length(length, start, stop)
    return None
