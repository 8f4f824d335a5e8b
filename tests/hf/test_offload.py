"""lazystore.hf.offload with the real accelerate and transformers: modules
on "disk" read their weights from the lazystore file at each forward,
lazily, checked, with outputs bit-identical to the model in memory and no
offload folder written."""

from __future__ import annotations

import gc
import os
import weakref

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")
pytest.importorskip("transformers")

import lazystore as ls
from lazystore.hf.offload import FileWeights, dispatch_from_file
from lazystore.torch import save_file
from tests.hf import offload_models as om


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny GPT-2, its reference logits, and its weights saved raw and
    compressed (tied lm_head recorded as an alias of wte)."""
    folder = tmp_path_factory.mktemp("gpt2")
    config = om.gpt2_config()
    model = om.gpt2(config)
    files = {}
    for compression in (None, "zstd"):
        files[compression] = folder / f"model-{compression}.lzy"
        save_file(model.state_dict(), files[compression], compression=compression)
    return config, om.logits(model, om.tokens()), files, model


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_disk_modules_read_from_the_file_bit_identical_and_nothing_written(saved, compression):
    config, reference, files, _ = saved
    folder = files[compression].parent
    before = sorted(os.listdir(folder))
    model = om.meta_gpt2(config)
    assert dispatch_from_file(model, om.ALL_ON_DISK, files[compression]) is model
    assert torch.equal(om.logits(model, om.tokens()), reference)
    assert sorted(os.listdir(folder)) == before  # no offload folder, no .dat copies


@pytest.mark.slow
def test_an_empty_model_with_modules_in_memory_needs_nothing_else(saved):
    # Modules on "cpu" are read from the file once, at dispatch; the rest at each forward.
    config, reference, files, _ = saved
    model = om.meta_gpt2(config)
    placed = {"transformer.wte": "cpu", "lm_head": "cpu", "transformer.wpe": "cpu", "transformer.h.0": "cpu",
              "transformer.h.1": "disk", "transformer.h.2": "disk", "transformer.ln_f": "disk"}
    weights = FileWeights(files["zstd"])
    dispatch_from_file(model, placed, weights)
    in_memory = [n for n, p in model.named_parameters() if p.device.type != "meta"]
    assert weights.reads == len(in_memory) and in_memory  # a tie is read once
    assert model.lm_head.weight is model.transformer.wte.weight
    assert torch.equal(om.logits(model, om.tokens()), reference)


@pytest.mark.slow
def test_only_the_running_module_is_materialized_and_each_forward_reads_again(saved):
    config, reference, files, source = saved
    model = om.meta_gpt2(config)
    weights = FileWeights(files[None])
    dispatch_from_file(model, om.ALL_ON_DISK, weights)
    assert weights.reads == 0  # dispatching reads nothing: GPT-2 has no persistent buffers
    seen = []

    class Watch(torch.overrides.TorchFunctionMode):
        # At every op of the forward: which parameters hold real memory now?
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append({n for n, p in model.named_parameters() if p.device.type != "meta"})
            return func(*args, **(kwargs or {}))

    with Watch():
        assert torch.equal(om.logits(model, om.tokens()), reference)
    # At any moment, only the weights of the one module running were resident,
    # and over the forward each was.
    assert all(len({n.rpartition(".")[0] for n in names}) <= 1 for names in seen)
    assert set().union(*seen) == {n for n, _ in model.named_parameters()}
    assert all(p.device.type == "meta" for p in model.parameters())  # nothing kept after the forward
    # Every parameter name read once per forward (lm_head.weight, tied to wte, too).
    per_forward = len(list(source.named_parameters(remove_duplicate=False)))
    assert weights.reads == per_forward
    om.logits(model, om.tokens())
    assert weights.reads == 2 * per_forward


@pytest.mark.slow
def test_nothing_read_outlives_the_forward_that_read_it(saved, monkeypatch):
    # What makes peak memory one module's weights: every tensor handed to a
    # hook is dropped once its module has run (a raw tensor's private map
    # of the file goes with it; benchmarks/offload.py measures the RSS).
    config, reference, files, _ = saved
    handed = []
    read = FileWeights.__getitem__

    def keep_track(self, key):
        t = read(self, key)
        handed.append(weakref.ref(t))
        return t

    monkeypatch.setattr(FileWeights, "__getitem__", keep_track)
    for compression in (None, "zstd"):
        model = om.meta_gpt2(config)
        dispatch_from_file(model, om.ALL_ON_DISK, files[compression])
        assert torch.equal(om.logits(model, om.tokens()), reference)
        gc.collect()
        assert handed and all(ref() is None for ref in handed)
        handed.clear()


@pytest.mark.slow
def test_a_tie_the_file_stores_once_is_served_under_both_names(saved, tmp_path):
    config, reference, _, source = saved
    path = tmp_path / "untied-file.lzy"
    # As transformers' safetensors files store a tie: under one name only.
    save_file({n: t.clone() for n, t in source.state_dict().items() if n != "lm_head.weight"}, path)
    model = om.meta_gpt2(config)
    dispatch_from_file(model, om.ALL_ON_DISK, path)
    assert torch.equal(om.logits(model, om.tokens()), reference)


@pytest.mark.slow
def test_names_map_model_names_to_the_files(saved, tmp_path):
    config, reference, _, source = saved
    path = tmp_path / "renamed.lzy"
    save_file({f"gpt.{n}": t.clone() for n, t in source.state_dict().items()}, path)
    names = {n: f"gpt.{n}" for n in source.state_dict()}
    model = om.meta_gpt2(config)
    dispatch_from_file(model, om.ALL_ON_DISK, FileWeights(path, names=names))
    assert torch.equal(om.logits(model, om.tokens()), reference)


@pytest.mark.slow
def test_a_damaged_tensor_fails_its_checksum_at_the_forward_that_reads_it(saved, tmp_path):
    config, _, files, _ = saved
    path = tmp_path / "damaged.lzy"
    path.write_bytes(files[None].read_bytes())
    with ls.open(path) as ck:
        at = ck.info("transformer.h.1.mlp.c_fc.weight").offset
    data = bytearray(path.read_bytes())
    data[at + 5] ^= 0x10
    path.write_bytes(bytes(data))
    model = om.meta_gpt2(config)
    dispatch_from_file(model, om.ALL_ON_DISK, path)
    with pytest.raises(ls.ChecksumError, match="transformer.h.1.mlp.c_fc.weight"):
        om.logits(model, om.tokens())
    unchecked = om.meta_gpt2(config)
    dispatch_from_file(unchecked, om.ALL_ON_DISK, FileWeights(path, verify=False))
    om.logits(unchecked, om.tokens())  # verify=False reads what is there


@pytest.mark.slow
def test_bad_input_gets_lazystores_errors_naming_the_file(saved, tmp_path):
    config, _, files, source = saved
    weights = FileWeights(files[None])
    with pytest.raises(ls.TensorNotFoundError, match=str(files[None])):
        weights["no.such.weight"]
    assert "no.such.weight" not in weights and weights.reads == 0
    with pytest.raises(ls.TensorNotFoundError, match="elsewhere"):
        FileWeights(files[None], names={"lm_head.weight": "elsewhere"})
    partial = tmp_path / "partial.lzy"
    save_file({n: t.clone() for n, t in source.state_dict().items() if ".h.2." not in n}, partial)
    with pytest.raises(ls.StateDictMismatchError, match=f"{partial}.*transformer.h.2"):
        dispatch_from_file(om.meta_gpt2(config), om.ALL_ON_DISK, partial)
    bigger = om.gpt2_config()
    bigger.n_embd = 64
    with pytest.raises(ls.StateDictMismatchError, match="shape"):
        dispatch_from_file(om.meta_gpt2(bigger), om.ALL_ON_DISK, files[None])
    with pytest.raises(FileNotFoundError):
        FileWeights(tmp_path / "missing.lzy")
    not_a_checkpoint = tmp_path / "notes.lzy"
    not_a_checkpoint.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ls.FormatError, match=str(not_a_checkpoint)):
        FileWeights(not_a_checkpoint)
