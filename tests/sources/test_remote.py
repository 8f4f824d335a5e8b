"""Remote checkpoints, against real servers on loopback started here.

- HTTP: lazystore.testing.rangeserver, an http.server honouring Range with
  206 answers that records every request and the bytes it sent, so each test
  asserts exactly what a reader fetched; it also misbehaves on demand
  (breaks off, short bodies, stalls, ignores Range; test_remote_faults.py
  goes through every fault it has).
- S3: moto's ThreadedMotoServer, the way s3fs's own tests run.
- memory://, fsspec's in-process store.

Nothing goes beyond 127.0.0.1.
"""

from __future__ import annotations

import gc
import importlib.util
import re
import socket
import time
import uuid

import aiohttp
import fsspec
import numpy as np
import pytest

import lazystore as ls
from lazystore._core.distribution import DISTRIBUTION
from lazystore._native import layout as fmt
from lazystore.sources import LocalFile, is_url, local_path, open_source
from lazystore.sources.fsspec import ATTEMPTS, MAX_GAP, MAX_REQUEST, FsspecSource
from lazystore.testing.strategies import reaches_mmap, same_tree
from tests.sources.checkpoints import file_bytes, tensors


@pytest.fixture(params=[None, "zstd"])
def served(request, tmp_path, server):
    """A 16-tensor checkpoint on the HTTP server: (server, url, tensors)."""
    arrays = tensors()
    server.files["ck.lzy"] = file_bytes(tmp_path, arrays, compression=request.param)
    return server, server.url("ck.lzy"), arrays


def stored_range(ck, name) -> tuple[int, int]:
    info = ck.info(name)
    return info.offset, info.offset + info.stored_nbytes


def within(server, start, stop) -> bool:
    return all(start <= r.start and r.stop <= stop for r in server.gets)


# ---------------------------------------------------------------------------
# what is fetched
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_opening_costs_at_most_two_small_requests(served):
    server, url, arrays = served
    with ls.open(url) as ck:
        assert list(ck) == list(arrays)
        assert len(server.requests) <= 2  # the size (HEAD) and the tail (one range)
        assert len(server.gets) == 1 and server.bytes_served <= fmt.TAIL_READ_BYTES
        assert server.gets[0].status == 206 and server.gets[0].stop == len(server.files["ck.lzy"])


@pytest.mark.slow
def test_a_large_index_takes_one_more_range(tmp_path, server):
    server.files["many.lzy"] = file_bytes(tmp_path, {f"t{i:05d}": np.zeros(2, np.float32) for i in range(3000)})
    with ls.open(server.url("many.lzy")) as ck:
        assert len(ck) == 3000
        assert len(server.gets) == 2  # the tail, then the rest of the index (format §13.1)


@pytest.mark.slow
def test_a_tensor_fetches_exactly_its_stored_bytes(served):
    server, url, arrays = served
    with ls.open(url) as ck:
        server.clear()
        name = "layer.7.weight"
        assert np.array_equal(ck[name], arrays[name])
        start, stop = stored_range(ck, name)
        assert server.bytes_served == stop - start
        assert within(server, start, stop)
        assert len(server.gets) == 1  # its chunks are neighbours: one request


@pytest.mark.slow
def test_a_compressed_slice_fetches_only_the_chunks_it_needs(tmp_path, server):
    arrays = tensors(2)
    server.files["ck.lzy"] = file_bytes(tmp_path, arrays, compression="zstd", chunk_bytes=8192)  # 16 rows a chunk
    with ls.open(server.url("ck.lzy")) as ck:
        name = "layer.1.weight"
        assert ck.info(name).compression == "zstd" and ck.info(name).chunk_count == 16
        server.clear()
        rows = ck.get_slice(name)[20:40]  # rows 20-39: chunks 1 and 2
        assert np.array_equal(rows, arrays[name][20:40])
        entry = ck._entry(name)
        start = entry.chunk_offsets()[1]
        stop = entry.chunk_offsets()[2] + entry.stored[2]
        assert server.bytes_served == stop - start and within(server, start, stop)
        assert len(server.gets) == 1


@pytest.mark.slow
def test_a_raw_slice_fetches_only_the_chunks_it_needs(tmp_path, server):
    arrays = tensors(2)
    server.files["ck.lzy"] = file_bytes(tmp_path, arrays, chunk_bytes=8192)
    with ls.open(server.url("ck.lzy")) as ck:
        server.clear()
        assert np.array_equal(ck.get_slice("layer.0.weight")[100:110], arrays["layer.0.weight"][100:110])
        assert server.bytes_served == 8192  # one chunk of 16 rows


@pytest.mark.slow
def test_a_big_tensor_is_fetched_in_concurrent_requests(tmp_path, server):
    big = np.arange(5 << 20, dtype=np.float32)  # 20 MiB
    server.files["big.lzy"] = file_bytes(tmp_path, {"big": big})
    with ls.open(server.url("big.lzy")) as ck:
        server.clear()
        server.delay = 0.2
        assert np.array_equal(ck["big"], big)
        start, stop = stored_range(ck, "big")
    assert server.bytes_served == stop - start and within(server, start, stop)
    assert len(server.gets) == -(-(stop - start) // MAX_REQUEST) == 3
    assert all(r.stop - r.start <= MAX_REQUEST for r in server.gets)
    assert server.max_in_flight == 3


@pytest.mark.slow
def test_load_merges_neighbouring_tensors_into_one_request(served):
    server, url, arrays = served
    keys = [f"layer.{i}.weight" for i in (4, 5, 6, 7)]
    server.clear()
    loaded = ls.load(url, keys=keys)
    assert all(np.array_equal(loaded[k], arrays[k]) for k in keys)
    gets = server.gets[1:]  # after the tail read of opening
    with ls.open(url) as ck:
        start, stop = stored_range(ck, keys[0])[0], stored_range(ck, keys[-1])[1]
    assert len(gets) == 1 and (gets[0].start, gets[0].stop) == (start, stop)  # padding in between, no more


@pytest.mark.slow
def test_load_fetches_separate_ranges_concurrently_and_nothing_between(served):
    server, url, arrays = served
    keys = ["layer.1.weight", "layer.6.weight", "layer.12.weight"]
    with ls.open(url) as ck:
        ranges = [stored_range(ck, k) for k in keys]
        assert all(b[0] - a[1] > MAX_GAP for a, b in zip(ranges, ranges[1:]))
        server.clear()
        server.delay = 0.3  # each answer waits, so requests sent together are seen together
        loaded = ck.load(keys)
    assert all(np.array_equal(loaded[k], arrays[k]) for k in keys)
    assert sorted((r.start, r.stop) for r in server.gets) == ranges
    assert server.max_in_flight == 3  # in flight together, not one after another


@pytest.mark.slow
def test_verify_reads_the_file_in_few_requests(served):
    server, url, _ = served
    with ls.open(url) as ck:
        server.clear()
        assert ck.verify() == []
    size = len(server.files["ck.lzy"])
    index_offset = int.from_bytes(server.files["ck.lzy"][-40:-32], "little")
    assert len(server.gets) <= 2  # the preamble, then every chunk and padding merged (2 MiB)
    assert server.bytes_served <= index_offset < size


# ---------------------------------------------------------------------------
# everything fetched is checked
# ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_corrupt_byte_is_caught_on_every_path(tmp_path, server, compression):
    arrays = tensors(4)
    data = bytearray(file_bytes(tmp_path, arrays, compression=compression))
    with _local(tmp_path, data) as local:
        offset = local.info("layer.2.weight").offset
    data[offset + 100] ^= 0x40
    server.files["ck.lzy"] = bytes(data)
    url = server.url("ck.lzy")
    with ls.open(url) as ck:
        with pytest.raises(ls.ChecksumError, match="layer.2.weight"):
            ck["layer.2.weight"]  # raw too: bytes fetched are always checked
        with pytest.raises(ls.ChecksumError):
            ck.get_slice("layer.2.weight")[0:2]
        assert np.array_equal(ck["layer.3.weight"], arrays["layer.3.weight"])
        assert ck.verify() == ["layer.2.weight"]
    with pytest.raises(ls.ChecksumError):
        ls.load(url, keys=["layer.1.weight", "layer.2.weight"])


def _local(tmp_path, data):
    path = tmp_path / "copy.lzy"
    path.write_bytes(bytes(data))
    return ls.open(path)


def test_a_corrupt_index_is_refused(tmp_path, server):
    data = bytearray(file_bytes(tmp_path, tensors(2)))
    index_offset = int.from_bytes(data[-40:-32], "little")
    data[index_offset + 70] ^= 1
    server.files["ck.lzy"] = bytes(data)
    with pytest.raises(ls.ChecksumError, match="index"):
        ls.open(server.url("ck.lzy"))


# ---------------------------------------------------------------------------
# servers that break off, stall or answer short
# ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["cut", "short", "error"])  # "whole": test_range_ignored.py
def test_one_bad_answer_is_retried(served, fault):
    server, url, arrays = served
    with ls.open(url) as ck:
        start, stop = stored_range(ck, "layer.3.weight")
        server.clear()
        server.faults = [fault]
        assert np.array_equal(ck["layer.3.weight"], arrays["layer.3.weight"])
    assert [(r.start, r.stop, r.fault) for r in server.gets] == [(start, stop, fault), (start, stop, None)]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["cut", "short"])
def test_bad_answers_every_time_are_a_clear_error_never_data(served, fault):
    server, url, _ = served
    with ls.open(url) as ck:
        start, stop = stored_range(ck, "layer.3.weight")
        server.faults = [fault] * ATTEMPTS
        with pytest.raises(ls.RemoteError, match=rf"bytes {start}-{stop} .*failed after {ATTEMPTS} attempts") as err:
            ck["layer.3.weight"]
    assert isinstance(err.value, OSError) and url in str(err.value)


@pytest.mark.slow
def test_a_failure_while_opening_is_retried_then_reported(served):
    server, url, arrays = served
    server.faults = ["cut"]
    with ls.open(url) as ck:
        assert np.array_equal(ck["layer.0.weight"], arrays["layer.0.weight"])
    server.faults = ["short"] * ATTEMPTS
    with pytest.raises(ls.RemoteError):
        ls.open(url)


@pytest.mark.slow
def test_a_failure_among_concurrent_requests_is_retried_alone(served):
    server, url, arrays = served
    keys = ["layer.1.weight", "layer.6.weight", "layer.12.weight"]
    with ls.open(url) as ck:
        server.clear()
        server.faults = ["cut"]
        loaded = ck.load(keys)
    assert all(np.array_equal(loaded[k], arrays[k]) for k in keys)
    assert len(server.gets) == 4  # three ranges, one of them twice


@pytest.mark.slow
def test_a_stalled_server_times_out_is_retried_then_reported(served):
    server, url, _ = served
    options = {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, sock_read=0.3)}}
    with ls.open(url, storage_options=options) as ck:
        server.faults = ["stall"] * ATTEMPTS
        t0 = time.perf_counter()
        with pytest.raises(ls.RemoteError, match=f"failed after {ATTEMPTS} attempts"):
            ck["layer.3.weight"]
        assert time.perf_counter() - t0 < server.stall_seconds
    assert [r.fault for r in server.gets[-ATTEMPTS:]] == ["stall"] * ATTEMPTS


def test_a_missing_object_is_file_not_found(server):
    with pytest.raises(FileNotFoundError):
        ls.open(server.url("nothing-here.lzy"))


@pytest.mark.slow
def test_no_server_is_a_remote_error_not_a_missing_file():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ls.RemoteError, match=f"failed after {ATTEMPTS} attempts"):
        ls.open(f"http://127.0.0.1:{port}/ck.lzy")


def test_http_is_read_only(server):
    with pytest.raises(ls.InvalidInputError, match="read-only"):
        ls.save({"a": np.zeros(3)}, server.url("new.lzy"))
    assert server.requests == []


# ---------------------------------------------------------------------------
# routing: local paths stay mapped; the extra is optional
# ---------------------------------------------------------------------------


def test_local_paths_and_file_urls_are_memory_mapped(tmp_path):
    arrays = tensors(2)
    path = tmp_path / "ck.lzy"
    ls.save(arrays, "file://" + str(path))  # a file:// save is a local, fsync'd save
    assert path.exists()
    for where in (path, str(path), "file://" + str(path)):
        source = open_source(where, {"ignored": "for local paths"})
        assert isinstance(source, LocalFile) and source.mapped() is not None
        source.close()
        with ls.open(where, storage_options={"anon": True}) as ck:
            assert reaches_mmap(ck["layer.0.weight"])
    assert local_path("file://localhost/tmp/x.lzy") == "/tmp/x.lzy"
    assert not is_url("model.lzy") and not is_url(path) and is_url("s3://b/k") and is_url("simplecache::s3://b/k")


def test_urls_without_the_extra_name_it(monkeypatch, tmp_path):
    path = tmp_path / "ck.lzy"
    ls.save(tensors(1), path)
    monkeypatch.setitem(__import__("sys").modules, "fsspec", None)  # as if not installed
    for call in (lambda: ls.open("s3://bucket/ck.lzy"), lambda: ls.save(tensors(1), "s3://bucket/ck.lzy")):
        with pytest.raises(ls.MissingDependencyError, match=re.escape(f"pip install '{DISTRIBUTION}[remote]'")):
            call()
    with ls.open(path) as ck:  # local paths never need it
        assert len(ck) == 1


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed")
def test_a_store_without_its_package_names_it():
    with pytest.raises(ls.MissingDependencyError, match="gcsfs"):
        ls.open("gs://bucket/ck.lzy")


def test_saving_where_a_part_could_show_is_refused():
    with pytest.raises(ls.InvalidInputError, match="simplecache"):
        ls.save({"a": np.zeros(3)}, "simplecache::memory://lazystore-tests/x.lzy")


# ---------------------------------------------------------------------------
# memory://
# ---------------------------------------------------------------------------


@pytest.fixture
def memory_url():
    folder = f"memory://lazystore-tests/{uuid.uuid4().hex}"
    yield folder + "/ck.lzy"
    fsspec.filesystem("memory").rm(folder.removeprefix("memory://"), recursive=True)


def listing(url: str) -> list[str]:
    fs = fsspec.filesystem("memory")
    folder = url.removeprefix("memory://").rsplit("/", 1)[0]
    return sorted(p.rsplit("/", 1)[1] for p in fs.find(folder, withdirs=False))


class Boom(Exception):
    pass


@pytest.mark.slow
def test_memory_save_open_and_atomic_failure(memory_url):
    arrays = tensors(4)
    ls.save(arrays, memory_url, compression="zstd", metadata={"v": 1})
    with ls.open(memory_url) as ck:
        assert ck.metadata == {"v": 1} and ck.verify() == []
        assert np.array_equal(ck["layer.2.weight"], arrays["layer.2.weight"])
    before = fsspec.filesystem("memory").cat_file(memory_url)
    with pytest.raises(Boom):
        with ls.Writer(memory_url) as w:
            w.add("new", np.ones(1000))
            assert listing(memory_url) != ["ck.lzy"]  # the new bytes go to a hidden temporary
            raise Boom
    w = ls.Writer(memory_url)
    w.add("dropped", np.ones(10))
    del w
    gc.collect()
    assert listing(memory_url) == ["ck.lzy"]
    assert fsspec.filesystem("memory").cat_file(memory_url) == before


def test_nested_state_through_a_url(memory_url):
    torch = pytest.importorskip("torch")
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3), "b": np.zeros(3, np.float16)},
             "optimizer": {"state": {0: {"step": 7, "exp_avg": np.ones(4)}}, "lr": 0.1},
             "history": [1.5, None, "warmup"], "epoch": 3}
    ls.save(state, memory_url)
    same_tree(state, ls.load(memory_url))
    part = ls.load(memory_url, keys=["model/w"])
    assert torch.equal(part["model"]["w"], state["model"]["w"]) and list(part) == ["model"]


# ---------------------------------------------------------------------------
# S3 (moto's server on loopback)
# ---------------------------------------------------------------------------


# s3_options and bucket: see conftest.py


@pytest.mark.slow
def test_s3_save_open_read_verify(s3_options, bucket):
    arrays = tensors(8)
    url = f"s3://{bucket}/ck.lzy"
    ls.save(arrays, url, compression="zstd", storage_options=s3_options)
    with ls.open(url, storage_options=s3_options) as ck:
        assert isinstance(ck._file.source, FsspecSource)
        assert np.array_equal(ck["layer.5.weight"], arrays["layer.5.weight"])
        assert np.array_equal(ck.get_slice("layer.6.weight")[3:9], arrays["layer.6.weight"][3:9])
        assert ck.verify() == []
    loaded = ls.load(url, keys="layer.[12].weight", storage_options=s3_options)
    assert sorted(loaded) == ["layer.1.weight", "layer.2.weight"]
    assert np.array_equal(loaded["layer.2.weight"], arrays["layer.2.weight"])


@pytest.mark.slow
def test_s3_a_multipart_save_that_fails_leaves_no_object_and_no_upload(s3_options, bucket):
    url = f"s3://{bucket}/ck.lzy"
    fs = fsspec.filesystem("s3", **s3_options)
    ls.save({"old": np.arange(10)}, url, storage_options=s3_options)
    before = fs.cat_file(f"{bucket}/ck.lzy")
    small_parts = {**s3_options, "default_block_size": 5 << 20}  # S3's smallest part
    rng = np.random.default_rng(1)
    with pytest.raises(Boom):
        with ls.Writer(url, storage_options=small_parts) as w:
            for i in range(4):  # 16 MiB: parts go out before the failure
                w.add(f"big{i}", rng.standard_normal(1 << 20).astype(np.float32))
            assert fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")
            raise Boom
    assert not fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")  # aborted
    fs.invalidate_cache()
    assert fs.cat_file(f"{bucket}/ck.lzy") == before  # the old object, untouched
    with ls.open(url, storage_options=s3_options) as ck:
        assert list(ck) == ["old"]

    new = f"s3://{bucket}/new.lzy"
    w = ls.Writer(new, storage_options=small_parts)  # dropped unfinished: cancelled, not completed
    w.add("big", rng.standard_normal(2 << 20).astype(np.float32))
    del w
    gc.collect()
    fs.invalidate_cache()
    assert not fs.exists(f"{bucket}/new.lzy")
    assert not fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads")


@pytest.mark.slow
def test_s3_a_multipart_save_appears_whole(s3_options, bucket):
    url = f"s3://{bucket}/big.lzy"
    small_parts = {**s3_options, "default_block_size": 5 << 20}
    rng = np.random.default_rng(2)
    arrays = {f"big{i}": rng.standard_normal(1 << 20).astype(np.float32) for i in range(3)}
    ls.save(arrays, url, storage_options=small_parts)
    loaded = ls.load(url, storage_options=s3_options)
    assert all(np.array_equal(loaded[k], v) for k, v in arrays.items())


@pytest.mark.slow
def test_s3_nested_state_and_missing_objects(s3_options, bucket):
    state = {"params": {"w": np.arange(12.0).reshape(3, 4)}, "step": 10, "names": ("a", "b")}
    url = f"s3://{bucket}/state.lzy"
    ls.save(state, url, storage_options=s3_options)
    same_tree(state, ls.load(url, storage_options=s3_options))
    with pytest.raises(FileNotFoundError):
        ls.open(f"s3://{bucket}/nothing.lzy", storage_options=s3_options)
