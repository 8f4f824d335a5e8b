"""Remote reads when the network and the server misbehave.

A loopback HTTP server (lazystore.testing.rangeserver) answers 503 now and
then, cuts bodies short, resets connections, flips a byte in transit, or has
the object replaced between open and read. Whatever it does, every read
(``ck[name]``, ``get_slice``, ``load``, ``verify``) either returns the saved
data bit for bit (after retries) or raises a LazyStoreError; never wrong
data, never an aiohttp, fsspec, asyncio or bare OS error. Request counts show
that transient failures are retried and that retries are bounded.

At the end: S3 saves (moto) that fail midway leave no object and no
multipart upload behind.
"""

from __future__ import annotations

import asyncio
import errno
import time
import urllib.error
import urllib.request
from collections import Counter

import aiohttp
import fsspec
import numpy as np
import pytest
from fsspec.asyn import sync_wrapper

import lazystore as ls
from lazystore.sources import fsspec as remote
from lazystore.sources.fsspec import ATTEMPTS
from lazystore.testing.rangeserver import (
    FAULTS,
    Every,
    Fault,
    RandomFaults,
    RangeServer,
)
from tests.sources.checkpoints import SHAPE, file_bytes, tensors

pytestmark = pytest.mark.slow  # (pyproject.toml: the quick tier leaves these out)

NAMES = [f"layer.{i}.weight" for i in range(8)]
APART = ["layer.0.weight", "layer.3.weight", "layer.6.weight"]  # never merged, even compressed: three ranges


@pytest.fixture(params=[None, "zstd"], ids=["raw", "zstd"])
def compression(request):
    return request.param


@pytest.fixture
def served(tmp_path, server, compression):
    """An 8-tensor checkpoint on the server: (server, url, tensors)."""
    arrays = tensors(8)
    server.files["ck.lzy"] = file_bytes(tmp_path, arrays, compression=compression)
    return server, server.url("ck.lzy"), arrays


@pytest.fixture
def quick(monkeypatch):
    """Retries without the backoff's pauses, for tests that fail many times."""
    monkeypatch.setattr(remote, "BACKOFF", 0.0)


# Every way of reading: True for exact data. "item" and "slice" make one
# request (fsspec's cat_file), the others several in parallel (cat_ranges).
def read_item(ck, url, arrays):
    return np.array_equal(ck["layer.3.weight"], arrays["layer.3.weight"])


def read_slice(ck, url, arrays):
    return np.array_equal(ck.get_slice("layer.5.weight")[17:90, 3:], arrays["layer.5.weight"][17:90, 3:])


def read_load(ck, url, arrays):
    loaded = ck.load(APART)
    return list(loaded) == APART and all(np.array_equal(loaded[k], arrays[k]) for k in APART)


def read_ls_load(ck, url, arrays):  # opens the URL again: the tail read is under the faults too
    loaded = ls.load(url, keys=APART)
    return list(loaded) == APART and all(np.array_equal(loaded[k], arrays[k]) for k in APART)


def read_verify(ck, url, arrays):
    return ck.verify(APART) == []


READS = {"item": read_item, "slice": read_slice, "load": read_load, "ls.load": read_ls_load, "verify": read_verify}
RANGES = {"item": 1, "slice": 1, "load": 3, "ls.load": 4, "verify": 3}  # GETs of a clean read (test_clean_reads)
OPEN_READS = [r for r in READS if r != "ls.load"]  # those that read through a checkpoint already open


def outcome(read, ck, url, arrays):
    """True for exact data, the LazyStoreError raised otherwise. False (wrong
    data) fails the caller's assertion; any other exception fails the test."""
    try:
        return read(ck, url, arrays)
    except ls.LazyStoreError as exc:
        return exc


def read_under(server, url, arrays, read, plan):
    """Open cleanly, then read with ``plan`` in force: (outcome, GETs made)."""
    server.plan = None
    with ls.open(url) as ck:
        server.clear()
        server.plan = plan
        result = outcome(read, ck, url, arrays)
        server.plan = None
    return result, server.gets


# ---------------------------------------------------------------------------
# transient failures are retried, a bounded number of times
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("read", READS)
def test_clean_reads(served, read):
    server, url, arrays = served
    result, gets = read_under(server, url, arrays, READS[read], None)
    assert result is True and len(gets) == RANGES[read]



@pytest.mark.parametrize("read", READS)
@pytest.mark.parametrize("status", [500, 502, 503, 504, 429, 408])
def test_transient_statuses_are_retried(served, read, status):
    server, url, arrays = served
    plan = Every(1, Fault("error", status=status), limit=ATTEMPTS - 1)  # fails all but the last attempt
    result, gets = read_under(server, url, arrays, READS[read], plan)
    assert result is True
    assert len(gets) == RANGES[read] + ATTEMPTS - 1
    assert [r.status for r in gets].count(status) == ATTEMPTS - 1


@pytest.mark.parametrize("read", READS)
@pytest.mark.parametrize("fault", ["cut", "short", "shifted", "reset"])  # "whole": test_range_ignored.py
def test_broken_answers_are_retried(served, read, fault):
    server, url, arrays = served
    result, gets = read_under(server, url, arrays, READS[read], Every(1, fault, limit=ATTEMPTS - 1))
    assert result is True
    # aiohttp itself sends a request again once on a reset keep-alive connection
    assert len([r for r in gets if r.fault == fault]) == ATTEMPTS - 1
    assert len(gets) == RANGES[read] + ATTEMPTS - 1


@pytest.mark.parametrize("read", READS)
@pytest.mark.parametrize("fault", ["error", "cut", "short", "shifted"])
def test_retries_are_bounded_then_a_remote_error(served, read, fault):
    server, url, arrays = served
    t0 = time.perf_counter()
    result, gets = read_under(server, url, arrays, READS[read], Every(1, fault))
    assert isinstance(result, ls.RemoteError) and isinstance(result, OSError)
    assert url in str(result) and f"after {ATTEMPTS} attempts" in str(result)
    assert "reading bytes" in str(result)
    # each range tried ATTEMPTS times, then given up (ls.load gives up on the first: the tail)
    assert len(gets) == (1 if read == "ls.load" else RANGES[read]) * ATTEMPTS
    assert time.perf_counter() - t0 < 2


def test_the_error_names_the_url_the_range_the_attempts_and_the_cause(served):
    server, url, _ = served
    with ls.open(url) as ck:
        info = ck.info("layer.3.weight")
        server.plan = Every(1, "error")
        with pytest.raises(ls.RemoteError) as err:
            ck["layer.3.weight"]
    message = str(err.value)
    assert url in message and f"bytes {info.offset}-{info.offset + info.stored_nbytes}" in message
    assert f"after {ATTEMPTS} attempts" in message and "503" in message
    assert isinstance(err.value.__cause__, aiohttp.ClientResponseError)  # the cause is kept, not raised


def test_a_failure_among_parallel_ranges_is_retried_alone(served):
    server, url, arrays = served
    result, gets = read_under(server, url, arrays, read_load, Every(2, "error", limit=1))
    assert result is True
    assert len(gets) == 4 and sorted((r.start, r.stop) for r in gets if r.fault) in \
        [[(r.start, r.stop)] for r in gets if r.fault is None]  # the failed range, asked again


def test_retry_after_is_honoured(served):
    server, url, arrays = served
    t0 = time.perf_counter()
    result, gets = read_under(server, url, arrays, read_item, Every(1, Fault("error", retry_after=1), limit=1))
    assert result is True and len(gets) == 2
    assert time.perf_counter() - t0 >= 1


def test_a_long_retry_after_is_capped(served, monkeypatch):
    server, url, arrays = served
    monkeypatch.setattr(remote, "MAX_RETRY_AFTER", 0.2)
    t0 = time.perf_counter()
    result, _ = read_under(server, url, arrays, read_item, Every(1, Fault("error", retry_after=3600), limit=2))
    assert result is True
    assert 0.4 <= time.perf_counter() - t0 < 2


def test_backoff_grows_between_attempts(served, monkeypatch):
    server, url, arrays = served
    pauses = []
    monkeypatch.setattr(remote.time, "sleep", pauses.append)
    result, _ = read_under(server, url, arrays, read_item, Every(1, "error"))
    assert isinstance(result, ls.RemoteError)
    assert pauses == [remote.BACKOFF * 2**i for i in range(ATTEMPTS - 1)]


@pytest.mark.parametrize("status, code", [(400, None), (401, errno.EACCES), (403, errno.EACCES),
                                          (404, errno.ENOENT), (416, None)])
def test_a_refusal_is_not_retried(served, status, code):
    server, url, arrays = served
    result, gets = read_under(server, url, arrays, read_item, Every(1, Fault("error", status=status)))
    assert isinstance(result, ls.RemoteError) and result.errno == code
    assert "not retried" in str(result)
    assert (str(status) if status != 404 else "no such object") in str(result)
    assert len(gets) == 1


@pytest.mark.parametrize("read", READS)
def test_connections_reset_every_time_are_a_remote_error(served, read):
    server, url, arrays = served
    result, gets = read_under(server, url, arrays, READS[read], Every(1, "reset"))
    assert isinstance(result, ls.RemoteError) and f"after {ATTEMPTS} attempts" in str(result)
    assert isinstance(result.__cause__, aiohttp.ClientError)
    # each attempt is one request, or two where aiohttp itself asks again on a reset keep-alive connection
    ranges = 1 if read == "ls.load" else RANGES[read]
    assert ranges * ATTEMPTS <= len(gets) <= 2 * ranges * ATTEMPTS


def test_a_server_gone_after_open_is_a_remote_error(tmp_path, quick):
    arrays = tensors(8)
    server = RangeServer({"ck.lzy": file_bytes(tmp_path, arrays)}).start()
    url = server.url("ck.lzy")
    with ls.open(url) as ck:
        assert read_item(ck, url, arrays)  # a keep-alive connection in fsspec's pool
        server.stop()
        for read in (read_item, read_load, read_verify):
            with pytest.raises(ls.RemoteError, match=f"after {ATTEMPTS} attempts") as err:
                read(ck, url, arrays)
            assert isinstance(err.value.__cause__, aiohttp.ClientError)


# ---------------------------------------------------------------------------
# opening
# ---------------------------------------------------------------------------


def test_a_503_while_asking_the_size_is_retried(served):
    server, url, arrays = served
    # fsspec asks with HEAD, then with GET: both fail on the first attempt
    server.plan = Every(1, "error", limit=2, method=None)
    with ls.open(url) as ck:
        assert np.array_equal(ck["layer.0.weight"], arrays["layer.0.weight"])
    assert [r.status for r in server.requests[:3]] == [503, 503, 200]


def test_a_size_that_never_comes_is_a_remote_error_not_a_missing_file(served):
    server, url, _ = served
    server.plan = Every(1, "error", method=None)
    with pytest.raises(ls.RemoteError, match=f"after {ATTEMPTS} attempts") as err:
        ls.open(url)
    assert not isinstance(err.value, FileNotFoundError) and "503" in str(err.value)
    assert len(server.requests) == 2 * ATTEMPTS  # HEAD and GET, each attempt


def test_a_refused_size_is_a_remote_error(served):
    server, url, _ = served
    server.plan = Every(1, Fault("error", status=403), method=None)
    with pytest.raises(ls.RemoteError, match="not retried") as err:
        ls.open(url)
    assert err.value.errno == errno.EACCES


def test_a_missing_object_is_still_file_not_found(server):
    with pytest.raises(FileNotFoundError):
        ls.open(server.url("nothing-here.lzy"))
    assert len(server.requests) == 2  # HEAD and GET, not retried


@pytest.mark.parametrize("fault", ["error", "cut", "short", "shifted", "reset"])
def test_a_failed_index_read_is_retried(served, fault):
    server, url, arrays = served
    server.plan = Every(1, fault, limit=ATTEMPTS - 1)  # the GETs of the tail
    with ls.open(url) as ck:
        assert list(ck) == NAMES
        assert np.array_equal(ck["layer.7.weight"], arrays["layer.7.weight"])


def test_a_flipped_byte_in_the_index_is_never_taken_for_an_index(served):
    server, url, _ = served
    server.plan = Every(1, Fault("flip", at=(1 << 16) - 50), limit=1)  # in the index, near the tail's end
    with pytest.raises(ls.LazyStoreError):
        ls.open(url)


# ---------------------------------------------------------------------------
# a byte flipped in transit
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("read", OPEN_READS)  # ls.load: see test_a_flipped_byte_in_the_index...
def test_a_byte_flipped_in_transit_is_fetched_again(served, read):
    server, url, arrays = served
    result, gets = read_under(server, url, arrays, READS[read], Every(1, "flip", limit=1))
    assert result is True
    flipped = gets[0].flipped
    with ls.open(url) as ck:  # did the flip land in a chunk (not in padding between tensors)?
        in_chunk = any(i.offset <= flipped < i.offset + i.stored_nbytes for i in map(ck.info, NAMES))
    assert len(gets) == RANGES[read] + in_chunk  # the damaged chunk, fetched once more


@pytest.mark.parametrize("read", OPEN_READS)
def test_a_byte_flipped_every_time_is_a_checksum_error(served, read):
    server, url, arrays = served
    result, _ = read_under(server, url, arrays, READS[read], Every(1, Fault("flip", at=5)))
    if read == "verify":
        assert result is False  # damage named: no reader can tell it from damage in storage
    else:
        assert isinstance(result, ls.ChecksumError)  # the object is unchanged: damage, not a swap


def test_verify_names_a_tensor_only_when_its_damage_persists(served):
    server, url, _ = served
    with ls.open(url) as ck:
        start = ck.info("layer.3.weight").offset
        server.plan = Every(1, Fault("flip", at=5), limit=1)
        assert ck.verify(APART) == []
        server.plan = lambda request: Fault("flip", at=5) if request.start == start else None
        assert ck.verify(APART) == ["layer.3.weight"]  # flipped on every fetch: as good as damaged


# ---------------------------------------------------------------------------
# the object replaced between open and read
# ---------------------------------------------------------------------------


def same_size_other(tmp_path, data: bytes, compression) -> bytes:
    """Another checkpoint (other values) of exactly len(data) bytes."""
    other = file_bytes(tmp_path, {k: v + 1 for k, v in tensors(8).items()}, compression=compression)
    return (other + bytes(len(data)))[: len(data)]  # zstd sizes differ: cut or pad to the same size


@pytest.mark.parametrize("read", OPEN_READS)  # ls.load would open the new object: all of it, rightly
@pytest.mark.parametrize("size", ["same size", "larger", "smaller"])
def test_a_replaced_object_is_detected_never_mixed_in(tmp_path, served, compression, read, size):
    server, url, arrays = served
    data = server.files["ck.lzy"]
    other = {
        "same size": same_size_other(tmp_path, data, compression),
        "larger": file_bytes(tmp_path, tensors(12, seed=1), compression=compression),
        "smaller": file_bytes(tmp_path, tensors(2, seed=1), compression=compression),
    }[size]
    assert (len(other) > len(data), len(other) < len(data)) == \
        {"same size": (False, False), "larger": (True, False), "smaller": (False, True)}[size]
    with ls.open(url) as ck:
        server.files["ck.lzy"] = other
        result = outcome(READS[read], ck, url, arrays)
    assert isinstance(result, ls.RemoteError) and "changed since it was opened" in str(result)


def test_a_swap_between_parallel_requests_is_detected(tmp_path, served, compression):
    server, url, arrays = served
    other = same_size_other(tmp_path, server.files["ck.lzy"], compression)
    result, _ = read_under(server, url, arrays, read_load, Every(2, Fault("swap", data=other), limit=1))
    assert isinstance(result, ls.RemoteError) and "changed since it was opened" in str(result)


def test_a_deleted_object_is_a_remote_error(served):
    server, url, _ = served
    with ls.open(url) as ck:
        del server.files["ck.lzy"]
        with pytest.raises(ls.RemoteError, match="gone since it was opened") as err:
            ck["layer.3.weight"]
    assert err.value.errno == errno.ENOENT


def test_the_same_bytes_put_back_are_read(served):
    server, url, arrays = served
    with ls.open(url) as ck:
        server.files["ck.lzy"] = bytes(server.files["ck.lzy"])  # a new object, the same bytes
        assert read_item(ck, url, arrays) and read_load(ck, url, arrays)


# ---------------------------------------------------------------------------
# whatever fsspec or aiohttp raise comes out as a RemoteError
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("raised, transient", [
    (aiohttp.ClientPayloadError("Response payload is not completed"), True),
    (aiohttp.ServerDisconnectedError(), True),
    (aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer"), True),
    (asyncio.TimeoutError(), True),
    (asyncio.CancelledError(), True),
    (fsspec.exceptions.FSTimeoutError(), True),
    (ConnectionResetError(errno.ECONNRESET, "reset"), True),
    (RuntimeError("Session is closed"), True),
    (PermissionError(errno.EACCES, "denied"), False),
])
@pytest.mark.parametrize("ranges", [1, 2], ids=["cat_file", "cat_ranges"])
def test_any_failure_of_the_filesystem_becomes_a_remote_error(served, quick, monkeypatch, raised, transient, ranges):
    _, url, _ = served
    calls = []

    def fail(*args, **kwargs):
        calls.append(args)
        raise raised

    with ls.open(url) as ck:
        fs = fsspec.filesystem("http")  # fsspec's cached instance: the one the checkpoint reads with
        monkeypatch.setattr(fs, "cat_file", fail)
        monkeypatch.setattr(fs, "cat_ranges", fail)
        with pytest.raises(ls.RemoteError) as err:
            ck.load(APART[:ranges])
    assert len(calls) == (ATTEMPTS if transient else 1)
    assert err.value.__cause__ is raised
    if isinstance(raised, OSError) and raised.errno:
        assert err.value.errno == raised.errno


def test_a_whole_batch_failing_at_once_is_retried(served, monkeypatch):
    _, url, arrays = served
    with ls.open(url) as ck:
        fs = fsspec.filesystem("http")  # fsspec's cached instance: the one the checkpoint reads with
        real, calls = fs.cat_ranges, []

        def flaky(*args, **kwargs):
            calls.append(args)
            if len(calls) == 1:
                raise aiohttp.ServerDisconnectedError()
            return real(*args, **kwargs)

        monkeypatch.setattr(fs, "cat_ranges", flaky)
        assert read_load(ck, url, arrays)
    assert len(calls) == 2


# ---------------------------------------------------------------------------
# property: random fault plans, random reads: exact data or a LazyStoreError
# ---------------------------------------------------------------------------


def random_read(rng, ck, arrays):
    """One of the four reads, of random tensors or rows: (what, read) where
    read() is True for exact data (verify: for no damage reported)."""
    names = rng.choice(NAMES, size=int(rng.integers(1, 5)), replace=False).tolist()
    name = names[0]
    a, b = sorted(rng.integers(0, SHAPE[0], size=2).tolist())
    reads = {
        f"ck[{name!r}]": lambda: np.array_equal(ck[name], arrays[name]),
        f"get_slice({name!r})[{a}:{b + 1}]":
            lambda: np.array_equal(ck.get_slice(name)[a : b + 1], arrays[name][a : b + 1]),
        f"load({names})": lambda: all(np.array_equal(v, arrays[k]) for k, v in ck.load(names).items()),
        f"verify({names})": lambda: ck.verify(names) or True,
    }
    what = list(reads)[int(rng.integers(len(reads)))]
    return what, reads[what]


def flipped_on_every_fetch(server, ck, damaged: list[str]) -> bool:
    """Was each tensor verify() called damaged hit by flips in at least two
    requests (the fetch and the fetch once more)? Then "damaged" is right: no
    reader can tell a byte flipped on every fetch from one flipped in storage."""
    starts = sorted(ck.info(n).offset for n in NAMES) + [len(server.files["ck.lzy"])]
    for name in damaged:
        lo = ck.info(name).offset
        hi = starts[starts.index(lo) + 1]  # its chunks and its padding
        if sum(1 for r in server.gets if r.flipped is not None and lo <= r.flipped < hi) < 2:
            return False
    return True


@pytest.mark.parametrize("seed", range(4))
def test_random_faults_never_give_wrong_data(tmp_path, server, quick, seed):
    rng = np.random.default_rng(seed)
    arrays = tensors(8, seed)
    compression = [None, "zstd"][seed % 2]
    data = file_bytes(tmp_path, arrays, compression=compression, chunk_bytes=1 << int(rng.integers(12, 18)))
    other = same_size_other(tmp_path, data, compression)
    url = server.url("ck.lzy")
    outcomes = Counter()
    t0 = time.perf_counter()
    for i in range(40):
        faults = RandomFaults(seed=seed * 1000 + i, rate=float(rng.uniform(0.1, 0.8)),
                              kinds=rng.choice(RandomFaults.KINDS, size=int(rng.integers(1, 4))).tolist())
        swap = Every(int(rng.integers(1, 4)), Fault("swap", data=other), limit=1) if rng.random() < 0.2 else None
        server.files["ck.lzy"] = data
        server.plan = None
        with ls.open(url) as ck:
            what, read = random_read(rng, ck, arrays)
            server.clear()
            server.plan = lambda r, faults=faults, swap=swap: (swap and swap(r)) or faults(r)
            try:
                result = read()
            except ls.LazyStoreError as exc:
                result = exc
            server.plan = None
            context = f"{what} under plan {i} (seed {seed}): {result!r}"
            if isinstance(result, list):  # verify() named damaged tensors
                assert flipped_on_every_fetch(server, ck, result), context
                result = ls.ChecksumError("verify", 0, 0)
            assert result is True or isinstance(result, ls.LazyStoreError), context
            outcomes["exact" if result is True else type(result).__name__] += 1
        # Bounded: no range is asked for more than ATTEMPTS times, and as many again to fetch a chunk
        # once more after a checksum failure; aiohttp may resend a request once after a reset.
        asked = Counter((r.start, r.stop) for r in server.gets)
        answered = Counter((r.start, r.stop) for r in server.gets if r.fault != "reset")
        assert max(answered.values(), default=0) <= 2 * ATTEMPTS, context
        assert max(asked.values(), default=0) <= 4 * ATTEMPTS, context
    assert outcomes["exact"] >= 10 and sum(outcomes.values()) - outcomes["exact"] >= 3, outcomes  # both happen
    assert time.perf_counter() - t0 < 10


# ---------------------------------------------------------------------------
# the fault injection itself
# ---------------------------------------------------------------------------


def test_random_faults_depend_on_the_seed_and_the_request_not_on_order(server):
    server.files["x"] = bytes(range(256)) * 64
    runs = []
    for order in (range(64), reversed(range(64))):
        server.clear()
        server.plan = RandomFaults(seed=7, rate=0.5, kinds=["error", "short"])
        for i in order:
            _get(server.url("x"), i * 100, i * 100 + 50)
        runs.append(sorted((r.start, r.fault) for r in server.gets))
    assert runs[0] == runs[1] and {f for _, f in runs[0]} == {None, "error", "short"}


def _get(url, start, stop):
    """(status, body, ETag) of a plain range request, without retries."""
    req = urllib.request.Request(url, headers={"Range": f"bytes={start}-{stop - 1}"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read(), r.headers.get("ETag")
    except urllib.error.HTTPError as exc:
        return exc.code, b"", None
    except Exception:  # noqa: BLE001 - a cut or reset connection
        return None, b"", None


def test_fault_kinds_do_what_they_say(server):
    data = bytes(range(256)) * 16
    server.files["x"] = data
    url = server.url("x")
    assert _get(url, 0, 100)[:2] == (206, data[:100])
    server.faults = [Fault("flip", at=3)]
    status, body, _ = _get(url, 10, 20)
    assert status == 206 and body[3] == data[13] ^ 0xFF and body[:3] + body[4:] == data[10:13] + data[14:20]
    assert server.gets[-1].flipped == 13
    server.faults = [Fault("error", status=429, retry_after=2)]
    assert _get(url, 0, 10)[0] == 429
    server.faults = ["short"]
    assert _get(url, 0, 100)[:2] == (206, data[:50])
    server.faults = ["shifted", "shifted"]
    assert _get(url, 0, 100)[:2] == (206, data[1:101]) and _get(url, 4000, 4096)[:2] == (206, data[3999:4095])
    server.faults = ["whole"]
    assert _get(url, 0, 100)[:2] == (200, data)
    _, _, etag = _get(url, 0, 1)
    server.faults = [Fault("swap", data=data[::-1])]
    status, body, new_etag = _get(url, 0, 4)
    assert body == data[::-1][:4] and server.files["x"] == data[::-1] and new_etag != etag
    assert set(FAULTS) >= {"cut", "short", "stall", "whole", "shifted", "error", "reset", "flip", "swap"}
    with pytest.raises(ValueError):
        Fault("melt")


def test_every_counts_requests_of_its_method(server):
    plan = Every(3, "error", limit=2)
    server.files["x"] = b"abc" * 10
    server.plan = plan
    statuses = [_get(server.url("x"), 0, 3)[0] for _ in range(12)]
    assert statuses == [206, 206, 503, 206, 206, 503] + [206] * 6
    assert [r.attempt for r in server.gets[:3]] == [1, 2, 3]


# ---------------------------------------------------------------------------
# S3 (moto): a save that fails midway leaves nothing behind
# ---------------------------------------------------------------------------


def fail_s3_calls(monkeypatch, fs, should_fail) -> list:
    """Make s3fs's calls to S3 raise where ``should_fail(method, kwargs, calls so far)``
    says; returns the list of the methods called."""
    cls, real, calls = type(fs), type(fs)._call_s3, []

    async def call_s3(self, method, *args, **kwargs):
        calls.append(method)
        failure = should_fail(method, kwargs, calls)
        if failure is not None:
            raise failure
        return await real(self, method, *args, **kwargs)

    monkeypatch.setattr(cls, "_call_s3", call_s3)
    monkeypatch.setattr(cls, "call_s3", sync_wrapper(call_s3))  # the sync twin holds the original
    return calls


def uploads(fs, bucket) -> list:
    return fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads", [])


def big(n: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"big{i}": rng.standard_normal(1 << 20).astype(np.float32) for i in range(n)}  # 4 MiB each


@pytest.fixture
def s3(s3_options, bucket):
    """(fs, bucket, url, storage options with S3's smallest part size)."""
    fs = fsspec.filesystem("s3", **s3_options)
    return fs, bucket, f"s3://{bucket}/ck.lzy", {**s3_options, "default_block_size": 5 << 20}


def assert_nothing_left(fs, bucket, before: bytes | None):
    fs.invalidate_cache()
    assert uploads(fs, bucket) == []
    if before is None:
        assert not fs.exists(f"{bucket}/ck.lzy")
    else:
        assert fs.cat_file(f"{bucket}/ck.lzy") == before


@pytest.mark.parametrize("existing", [False, True], ids=["new", "over an old one"])
def test_s3_a_save_whose_input_fails_midway_leaves_nothing(s3, existing):
    fs, bucket, url, options = s3
    before = None
    if existing:
        ls.save({"old": np.arange(10)}, url, storage_options=options)
        before = fs.cat_file(f"{bucket}/ck.lzy")
    state = {**big(), "bad": np.array([object(), object()])}  # 16 MiB go up before it fails
    with pytest.raises(ls.LazyStoreError):
        ls.save(state, url, storage_options=options)
    assert_nothing_left(fs, bucket, before)


@pytest.mark.parametrize("failing", ["create_multipart_upload", "upload_part", "complete_multipart_upload"])
def test_s3_a_save_whose_upload_fails_midway_is_a_remote_error_and_leaves_nothing(s3, monkeypatch, failing):
    fs, bucket, url, options = s3
    ls.save({"old": np.arange(10)}, url, storage_options=options)
    before = fs.cat_file(f"{bucket}/ck.lzy")

    def should_fail(method, kwargs, calls):
        if method == failing and (method != "upload_part" or kwargs.get("PartNumber") == 2):
            return OSError(errno.EIO, f"injected failure of {method}")
        return None

    calls = fail_s3_calls(monkeypatch, fs, should_fail)
    with pytest.raises(ls.RemoteError) as err:
        ls.save(big(), url, storage_options=options)
    assert err.value.errno == errno.EIO and url in str(err.value) and f"injected failure of {failing}" in str(err.value)
    assert ("abort_multipart_upload" in calls) == (failing != "create_multipart_upload")
    monkeypatch.undo()
    assert_nothing_left(fs, bucket, before)


def test_s3_an_abort_that_fails_once_is_tried_again(s3, monkeypatch):
    fs, bucket, url, options = s3

    def should_fail(method, kwargs, calls):
        if method == "upload_part" and kwargs.get("PartNumber") == 2:
            return OSError(errno.EIO, "injected failure of the part")
        if method == "abort_multipart_upload" and calls.count(method) == 1:
            return OSError(errno.ECONNRESET, "injected failure of the abort")
        return None

    calls = fail_s3_calls(monkeypatch, fs, should_fail)
    with pytest.raises(ls.RemoteError, match="injected failure of the part"):
        ls.save(big(), url, storage_options=options)
    assert calls.count("abort_multipart_upload") == 2
    monkeypatch.undo()
    assert_nothing_left(fs, bucket, None)


def test_s3_an_object_replaced_while_open_is_detected(tmp_path, s3):
    fs, bucket, url, options = s3
    arrays = tensors(8)
    data = file_bytes(tmp_path, arrays)
    fs.pipe_file(f"{bucket}/ck.lzy", data)
    with ls.open(url, storage_options=options) as ck:
        assert read_item(ck, url, arrays) and read_load(ck, url, arrays) and ck.verify() == []
        fs.pipe_file(f"{bucket}/ck.lzy", same_size_other(tmp_path, data, None))
        with pytest.raises(ls.RemoteError, match="changed since it was opened.*ETag"):
            ck["layer.2.weight"]
