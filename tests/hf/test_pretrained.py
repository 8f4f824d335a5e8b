"""lazystore.hf.from_pretrained with the real transformers and all-MiniLM-L6-v2's
trained weights: the model it builds from a folder of lazystore weights
(raw and compressed) gives outputs bit-identical to transformers' own load
of the safetensors folder, for AutoModel and concrete classes, dtypes, tied
weights and device maps; memory peaks at about the weights; a damaged file
or a folder without weights gets lazystore's error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers

import lazystore as ls
import lazystore.hf as lh
from tests.hf.helpers import bit_identical, outputs, tiny_tied_llama
from tests.paths import REPO


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_automodel_from_lazystore_weights_is_bit_identical(lazy_minilm, minilm_model, batch, compression):
    folder = lazy_minilm[compression]
    model = lh.from_pretrained(transformers.AutoModel, folder)
    assert type(model) is transformers.BertModel
    assert not model.training  # eval mode, as transformers leaves it
    assert bit_identical(outputs(model, batch), outputs(minilm_model, batch))
    # As transformers names a model loaded from a folder: by the folder, as given.
    assert model.config.name_or_path == str(folder)
    assert model.config.dtype == torch.float32  # from the weights: the config names none


@pytest.mark.slow
def test_concrete_class_in_bfloat16_matches_transformers(lazy_minilm, minilm_dir, batch):
    want = transformers.BertModel.from_pretrained(minilm_dir, dtype=torch.bfloat16)
    got = lh.from_pretrained(transformers.BertModel, lazy_minilm["zstd"], dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.config.dtype == torch.bfloat16
    assert bit_identical(outputs(got, batch), outputs(want, batch))


@pytest.mark.slow
def test_config_overrides_and_loading_info_as_transformers_gives_them(lazy_minilm, minilm_dir):
    want, want_info = transformers.AutoModel.from_pretrained(minilm_dir, output_attentions=True,
                                                             output_loading_info=True)
    got, got_info = lh.from_pretrained(transformers.AutoModel, lazy_minilm[None], output_attentions=True,
                                       output_loading_info=True)
    assert got.config.output_attentions is True
    assert got_info == want_info


@pytest.mark.slow
def test_a_config_object_and_model_init_arguments_pass_through(lazy_minilm, minilm_model, batch):
    config = transformers.BertConfig.from_pretrained(lazy_minilm[None])
    model = lh.from_pretrained(transformers.BertModel, lazy_minilm[None], config=config, add_pooling_layer=False)
    assert model.pooler is None  # an argument of BertModel.__init__, not of the config
    with torch.no_grad():
        got = model(**batch).last_hidden_state
        want = minilm_model(**batch).last_hidden_state
    assert torch.equal(got, want)


@pytest.mark.slow
def test_tied_weights_are_stored_once_and_tied_again(tmp_path):
    model = tiny_tied_llama()
    lh.save_pretrained(model, tmp_path / "lazy", compression="zstd")
    model.save_pretrained(tmp_path / "safetensors")
    with ls.open(tmp_path / "lazy" / "model.lzy") as ours, ls.open(tmp_path / "safetensors") as theirs:
        assert sorted(ours) == sorted(theirs)  # the names transformers writes: the tied one once
        assert "lm_head.weight" not in ours
    want = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "safetensors")
    got = lh.from_pretrained(transformers.AutoModelForCausalLM, tmp_path / "lazy")
    assert got.lm_head.weight is got.model.embed_tokens.weight
    ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(got(ids).logits, want(ids).logits)
        assert torch.equal(got(ids).logits, model(ids).logits)
    # The generation config comes from the folder, as transformers reads it.
    assert got.generation_config.to_dict() == want.generation_config.to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("device_map", ["auto", {"": "cpu"}])
def test_device_map_with_max_memory(lazy_minilm, minilm_model, batch, device_map):
    model = lh.from_pretrained(transformers.AutoModel, lazy_minilm["zstd"], device_map=device_map,
                               max_memory={"cpu": "1GB"})
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert bit_identical(outputs(model, batch), outputs(minilm_model, batch))


@pytest.mark.slow
def test_a_safetensors_folder_is_transformers_own_load(minilm_dir, minilm_model, batch):
    model = lh.from_pretrained(transformers.AutoModel, minilm_dir)
    assert bit_identical(outputs(model, batch), outputs(minilm_model, batch))


@pytest.mark.slow
def test_a_damaged_tensor_raises_checksum_error_naming_the_file(lazy_minilm, tmp_path):
    folder = tmp_path / "damaged"
    shutil.copytree(lazy_minilm[None], folder)
    name = "encoder.layer.3.output.dense.weight"
    with ls.open(folder / "model.lzy") as ck:
        offset = ck.info(name).offset
    with open(folder / "model.lzy", "r+b") as f:
        f.seek(offset + 1000)
        byte = f.read(1)[0]
        f.seek(offset + 1000)
        f.write(bytes([byte ^ 1]))
    with pytest.raises(ls.ChecksumError, match="model.lzy.*encoder.layer.3.output.dense.weight"):
        lh.from_pretrained(transformers.AutoModel, folder)
    # verify=False reads the bytes as they are (the flipped bit lands in the weight).
    model = lh.from_pretrained(transformers.AutoModel, folder, verify=False)
    assert model.encoder.layer[3].output.dense.weight.shape == (384, 1536)


def test_a_truncated_weights_file_is_a_format_error_naming_it(lazy_minilm, tmp_path):
    shutil.copy(lazy_minilm[None] / "config.json", tmp_path)
    (tmp_path / "model.lzy").write_bytes((lazy_minilm[None] / "model.lzy").read_bytes()[:5000])
    with pytest.raises(ls.FormatError, match=r"model\.lzy: not a lazystore file, or truncated"):
        lh.from_pretrained(transformers.AutoModel, tmp_path)


def test_a_folder_without_weights_is_refused_naming_what_was_looked_for(minilm_dir, tmp_path):
    shutil.copy(minilm_dir / "config.json", tmp_path)
    with pytest.raises(ls.FormatError, match=r"no model weights: no model\.lzy"):
        lh.from_pretrained(transformers.AutoModel, tmp_path)


@pytest.mark.slow
def test_a_folder_with_both_kinds_of_weights_is_refused_unless_told_which(lazy_minilm, minilm_dir, tmp_path,
                                                                         batch, minilm_model):
    folder = tmp_path / "both"
    shutil.copytree(lazy_minilm["zstd"], folder)
    shutil.copy(minilm_dir / "model.safetensors", folder)
    with pytest.raises(ls.FormatError, match="model.lzy.*model.safetensors"):
        lh.from_pretrained(transformers.AutoModel, folder)
    for choice in (True, False):  # True: transformers' weights; False: lazystore's
        model = lh.from_pretrained(transformers.AutoModel, folder, use_safetensors=choice)
        assert bit_identical(outputs(model, batch), outputs(minilm_model, batch))


@pytest.mark.parametrize("cls", [torch.nn.Linear, "AutoModel", transformers.PreTrainedModel])
def test_a_class_transformers_cannot_build_is_refused(lazy_minilm, cls):
    with pytest.raises(ls.InvalidInputError, match="not a transformers model class"):
        lh.from_pretrained(cls, lazy_minilm[None])


@pytest.mark.parametrize("argument", ["state_dict", "gguf_file"])
def test_arguments_that_replace_the_folders_weights_are_refused(lazy_minilm, argument):
    with pytest.raises(ls.InvalidInputError, match=argument):
        lh.from_pretrained(transformers.AutoModel, lazy_minilm[None], **{argument: {"x": torch.zeros(1)}})


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_modules_on_disk_read_their_weights_from_the_file(lazy_minilm, minilm_model, batch, tmp_path, monkeypatch,
                                                          compression):
    monkeypatch.chdir(tmp_path)  # where an offload folder would appear
    # 60 MB of memory: the 47 MB word embeddings fit, the encoder does not.
    model = lh.from_pretrained(transformers.AutoModel, lazy_minilm[compression], device_map="auto",
                               max_memory={"cpu": "60MB"})
    assert model.hf_device_map == {"embeddings": "cpu", "encoder": "disk", "pooler": "disk"}
    assert model.encoder.layer[0].output.dense.weight.device.type == "meta"  # read at each forward
    assert model.embeddings.word_embeddings.weight.device.type == "cpu"
    assert bit_identical(outputs(model, batch), outputs(minilm_model, batch))
    assert list(tmp_path.iterdir()) == []  # no offload folder: nothing copied


@pytest.mark.slow
def test_a_device_map_naming_disk(lazy_minilm, minilm_model, batch):
    device_map = {"embeddings": "disk", "encoder": "cpu", "pooler": "disk"}
    model = lh.from_pretrained(transformers.BertModel, lazy_minilm["zstd"], device_map=device_map)
    assert model.hf_device_map == device_map
    assert model.embeddings.word_embeddings.weight.device.type == "meta"
    assert bit_identical(outputs(model, batch), outputs(minilm_model, batch))


@pytest.mark.slow
def test_a_base_model_on_disk_from_a_checkpoint_with_a_head(tmp_path):
    # The file's names carry the base model's prefix ("bert.encoder..."); the model's do not.
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=500)
    torch.manual_seed(0)
    with_head = transformers.BertForMaskedLM(config).eval()
    lh.save_pretrained(with_head, tmp_path / "lazy")
    with_head.save_pretrained(tmp_path / "safetensors")
    want = transformers.BertModel.from_pretrained(tmp_path / "safetensors", add_pooling_layer=False)
    got = lh.from_pretrained(transformers.BertModel, tmp_path / "lazy", add_pooling_layer=False,
                             device_map={"embeddings": "cpu", "encoder": "disk"})
    assert got.encoder.layer[0].output.dense.weight.device.type == "meta"
    ids = torch.randint(0, 500, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(got(ids).last_hidden_state, want(ids).last_hidden_state)


# Loads models in a fresh process and prints, for each, how far its resident
# memory rose above what it was once torch and the model's code were imported
# (the peak is reset between loads: writing 5 to /proc/self/clear_refs).
PEAK = textwrap.dedent("""
    import gc, json, sys
    def status(key):
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key))
    import transformers, lazystore.hf as lh
    from transformers import AutoModel, BertModel  # the model's code, imported before measuring
    for folder, kwargs in json.loads(sys.argv[1]):
        gc.collect()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = status("VmRSS:")
        model = lh.from_pretrained(AutoModel, folder, **kwargs)
        rise = status("VmHWM:") - before
        print(json.dumps({"folder": folder, "rise": rise}))
        del model
""")


# How far above the weights a load may peak. Raw tensors are
# read into the parameters that keep them (views of the mapped file);
# compressed ones are decoded there too, beside the decoder's scratch and the
# loader threads' work in flight. A model built in memory and then loaded into
# holds its weights twice, at least: 2x. With every module on disk
# (max_memory below the smallest module) nothing is read at all.
ALL_ON_DISK = {"device_map": "auto", "max_memory": {"cpu": "30MB"}}
PEAKS = [("zstd", {}, 1.9), (None, {}, 1.25), ("zstd", ALL_ON_DISK, 0.25), (None, ALL_ON_DISK, 0.25)]


@pytest.mark.slow
def test_peak_memory_is_about_the_weights_or_less_with_modules_on_disk(lazy_minilm):
    cases = [(str(lazy_minilm[c]), kwargs) for c, kwargs, _ in PEAKS]
    out = subprocess.run([sys.executable, "-c", PEAK, json.dumps(cases)], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    got = [json.loads(line) for line in out.stdout.strip().splitlines()]
    assert [g["folder"] for g in got] == [folder for folder, _ in cases]
    for g, (_, _, limit) in zip(got, PEAKS, strict=True):
        with ls.open(g["folder"]) as ck:
            weights = ck.nbytes  # decoded: MiniLM's 86.6 MiB
        assert g["rise"] < limit * weights, (g, limit, weights)
