"""lazystore.torch's save_model / load_model: tied parameters, safetensors'
rules for names a model ties, strict errors, files safetensors wrote, and
loading into a module built on the meta device."""

from __future__ import annotations

import sys

import pytest
import safetensors.torch as st
import torch
from torch import nn

import lazystore as ls
from lazystore.torch import StateDictMismatchError, load_file, load_model, save_model


class TiedLM(nn.Module):
    """A language-model head tied to its embedding, as most LLMs are."""

    def __init__(self, vocab: int = 100, dim: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.body = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.register_buffer("positions", torch.arange(8, dtype=torch.float32))
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.norm(self.body(self.embed(ids))))


class Untied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)


class Twice(nn.Module):
    """One module registered under two names."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a


def test_tied_model_round_trip_is_bit_identical(tmp_path):
    torch.manual_seed(0)
    model = TiedLM()
    save_model(model, tmp_path / "m.lzy", compression="zstd")
    with ls.open(tmp_path / "m.lzy") as ck:
        assert "head.weight" not in ck and ck.metadata == {"head.weight": "embed.weight"}
    fresh = TiedLM()
    assert load_model(fresh, tmp_path / "m.lzy") == (set(), [])
    assert fresh.head.weight is fresh.embed.weight  # still tied
    ids = torch.arange(10)
    assert torch.equal(fresh(ids), model(ids))


def test_outputs_match_safetensors_load_model(tmp_path):
    torch.manual_seed(1)
    model = TiedLM()
    st.save_model(model, str(tmp_path / "m.safetensors"))
    save_model(model, tmp_path / "m.lzy")
    ours, theirs = TiedLM(), TiedLM()
    load_model(ours, tmp_path / "m.lzy")
    st.load_model(theirs, str(tmp_path / "m.safetensors"))
    ids = torch.arange(50) % 100
    assert torch.equal(ours(ids), theirs(ids))


def test_loads_files_safetensors_save_model_wrote(tmp_path):
    # safetensors drops the tied name and notes it in the metadata; the model's own tie covers it.
    model = TiedLM()
    st.save_model(model, str(tmp_path / "m.safetensors"))
    fresh = TiedLM()
    assert load_model(fresh, tmp_path / "m.safetensors") == (set(), [])
    assert torch.equal(fresh.embed.weight, model.embed.weight) and fresh.head.weight is fresh.embed.weight


def test_a_tied_file_loads_into_an_untied_model(tmp_path):
    # As torch.load's state dict would: each name gets the values (safetensors refuses).
    save_model(Twice(), tmp_path / "m.lzy")
    target = Untied()
    assert load_model(target, tmp_path / "m.lzy") == (set(), [])
    assert torch.equal(target.a.weight, target.b.weight) and target.a.weight is not target.b.weight


def test_distinct_tensors_for_one_tied_parameter_are_unexpected(tmp_path):
    source = Untied()
    save_model(source, tmp_path / "m.lzy")
    model = Twice()
    with pytest.raises(StateDictMismatchError, match=r'Unexpected key\(s\) in state_dict: "b.bias", "b.weight"'):
        load_model(model, tmp_path / "m.lzy")
    missing, unexpected = load_model(model, tmp_path / "m.lzy", strict=False)
    assert missing == set() and sorted(unexpected) == ["b.bias", "b.weight"]
    assert torch.equal(model.a.weight, source.a.weight)  # the first name of the group wins


def test_strict_errors_name_the_keys_and_are_runtime_errors(tmp_path):
    model = nn.Linear(3, 3)
    ls_state = {"weight": model.weight.detach(), "extra": torch.zeros(1)}
    from lazystore.torch import save_file

    save_file(ls_state, tmp_path / "m.lzy")
    with pytest.raises(RuntimeError) as exc:
        load_model(nn.Linear(3, 3), tmp_path / "m.lzy")
    assert isinstance(exc.value, ls.InvalidInputError)
    assert str(exc.value) == ('Error(s) in loading state_dict for Linear:\n'
                              '    Missing key(s) in state_dict: "bias"\n'
                              '    Unexpected key(s) in state_dict: "extra"')
    target = nn.Linear(3, 3)
    assert load_model(target, tmp_path / "m.lzy", strict=False) == ({"bias"}, ["extra"])
    assert torch.equal(target.weight, model.weight)
    # the same shapes as safetensors' own: a set of missing names, a list of unexpected ones
    import safetensors.torch as st

    st.save_file(ls_state, tmp_path / "m.safetensors")
    theirs = st.load_model(nn.Linear(3, 3), str(tmp_path / "m.safetensors"), strict=False)
    assert theirs == ({"bias"}, ["extra"]) and load_model(nn.Linear(3, 3), tmp_path / "m.lzy", strict=False) == theirs


def test_meta_model_gets_the_file_mapped_weights_and_its_ties(tmp_path):
    torch.manual_seed(2)
    model = TiedLM(vocab=1000, dim=64)
    save_model(model, tmp_path / "m.lzy")
    with torch.device("meta"):
        empty = TiedLM(vocab=1000, dim=64)
    assert load_model(empty, tmp_path / "m.lzy") == (set(), [])
    assert all(t.device.type == "cpu" for t in [*empty.parameters(), *empty.buffers()])
    assert isinstance(empty.embed.weight, nn.Parameter) and empty.embed.weight.requires_grad
    assert empty.head.weight is empty.embed.weight
    ids = torch.arange(10)
    assert torch.equal(empty(ids), model(ids))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_meta_model_memory_is_only_the_mapped_weights(tmp_path):
    # 64 MiB of weights into a meta model: nothing is allocated or copied;
    # the weights are pages of the file's mapping. Checking them (the
    # default) reads those pages in, as the page cache's, not this
    # process's own memory; with verify=False nothing is read until touched.
    model = nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(16)])
    save_model(model, tmp_path / "m.lzy")
    del model

    def resident() -> tuple[int, int]:
        """(all resident memory, the part that is not pages of files)"""
        with open("/proc/self/statm") as f:
            _, rss, shared = (int(x) * 4096 for x in f.read().split()[:3])
        return rss, rss - shared

    for verify in (True, False):
        with torch.device("meta"):
            empty = nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(16)])
        rss, own = resident()
        load_model(empty, tmp_path / "m.lzy", verify=verify)
        rss_after, own_after = resident()
        assert own_after - own < 16 << 20
        if not verify:
            assert rss_after - rss < 16 << 20
        assert all(p.device.type == "cpu" for p in empty.parameters())
        del empty


def test_device_is_checked_before_reading(tmp_path):
    save_model(nn.Linear(2, 2), tmp_path / "m.lzy")
    if torch.cuda.is_available():  # pragma: no cover - CPU-only machines
        model = nn.Linear(2, 2)
        load_model(model, tmp_path / "m.lzy", device="cuda:0")
        assert load_file(tmp_path / "m.lzy", device=0)["weight"].device.type == "cuda"
    else:
        with pytest.raises(ls.InvalidInputError, match="no cuda device is available"):
            load_model(nn.Linear(2, 2), tmp_path / "m.lzy", device="cuda:0")


def test_save_model_keeps_the_users_metadata(tmp_path):
    save_model(Twice(), tmp_path / "m.lzy", metadata={"b.weight": "mine", "format": "pt"})
    with ls.open(tmp_path / "m.lzy") as ck:
        assert ck.metadata == {"b.weight": "mine", "b.bias": "a.bias", "format": "pt"}
    fresh = Twice()
    assert load_model(fresh, tmp_path / "m.lzy") == (set(), [])
