"""lazystore.hf.big_model: accelerate's load_checkpoint_in_model and
load_checkpoint_and_dispatch over lazystore checkpoints, with the real
accelerate and transformers and all-MiniLM-L6-v2's trained weights: outputs
bit-identical to the model loaded in memory and to accelerate's own
safetensors + offload-folder path, nothing written to the offload folder."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")
transformers = pytest.importorskip("transformers")

import safetensors.torch as st

import lazystore as ls
from lazystore.hf.big_model import load_checkpoint_and_dispatch, load_checkpoint_in_model
from lazystore.torch import save_file
from tests.hf import offload_models as om

# A CPU budget under MiniLM's 90 MB: the embeddings and two layers fit, the
# other four layers and the pooler go to "disk".
BUDGET = {"cpu": 70_000_000}
AUTO = {"device_map": "auto", "max_memory": BUDGET, "no_split_module_classes": ["BertLayer"]}


@pytest.fixture(scope="module")
def minilm_files(minilm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("minilm")
    state = st.load_file(minilm)
    files = {"safetensors": minilm}
    for compression in (None, "zstd"):
        files[compression] = folder / f"model-{compression}.lzy"
        save_file(state, files[compression], compression=compression)
    config = transformers.BertConfig.from_json_file(minilm.parent / "config.json")
    return config, state, files


@pytest.fixture(scope="module")
def ids():
    return torch.randint(1000, 30000, (2, 11), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def in_memory(minilm_files, ids):
    """The reference: MiniLM loaded whole, in memory, from its safetensors weights."""
    config, state, _ = minilm_files
    model = transformers.BertModel(config).eval()
    model.load_state_dict(state, strict=False)  # the file's position_ids is not a BertModel state entry
    return hidden(model, ids)


def meta_bert(config):
    with accelerate.init_empty_weights():
        return transformers.BertModel(config).eval()


def hidden(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).last_hidden_state


@pytest.mark.slow
def test_accelerate_alone_cannot_load_a_lazystore_file(minilm_files):
    # The row: accelerate treats any file that is not .safetensors as torch.save's.
    config, _, files = minilm_files
    with pytest.raises(Exception, match="Weights only load failed"):
        accelerate.load_checkpoint_in_model(meta_bert(config), str(files[None]))


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_auto_map_over_budget_bit_identical_and_no_offload_folder(minilm_files, ids, in_memory, compression,
                                                                  tmp_path):
    config, _, files = minilm_files
    offload = tmp_path / "offload"
    model = load_checkpoint_and_dispatch(meta_bert(config), files[compression], offload_folder=offload, **AUTO)
    on_disk = [m for m, d in model.hf_device_map.items() if d == "disk"]
    assert len(on_disk) >= 4 and model.hf_device_map["embeddings"] == "cpu"
    assert torch.equal(hidden(model, ids), in_memory)
    assert not offload.exists()  # passed, not needed, not created


@pytest.mark.slow
def test_dtype_casts_as_accelerate_casts(minilm_files, ids, tmp_path):
    config, _, files = minilm_files
    ours = load_checkpoint_and_dispatch(meta_bert(config), files["zstd"], dtype="bfloat16", **AUTO)
    theirs = accelerate.load_checkpoint_and_dispatch(meta_bert(config), str(files["safetensors"]),
                                                     dtype=torch.bfloat16, offload_folder=tmp_path, **AUTO)
    assert ours.hf_device_map == theirs.hf_device_map  # the same max_memory computation
    out = hidden(ours, ids)
    assert out.dtype == torch.bfloat16 and torch.equal(out, hidden(theirs, ids))


@pytest.mark.slow
def test_without_a_device_map_everything_is_loaded_checked(minilm_files, tmp_path):
    config, state, files = minilm_files
    model = transformers.BertModel(config)
    assert load_checkpoint_in_model(model, files["zstd"]) is None
    assert all(torch.equal(t, state[n]) for n, t in model.state_dict().items())
    with pytest.raises(ls.StateDictMismatchError, match=f"{files[None]}.*position_ids"):
        load_checkpoint_in_model(meta_bert(config), files[None], strict=True)


@pytest.mark.slow
def test_folders_and_the_index_load_as_the_file(tmp_path):
    config = om.gpt2_config()
    source = om.gpt2(config)
    reference = om.logits(source, om.tokens())
    folder = tmp_path / "sharded"
    ls.save(dict(source.state_dict()), folder, max_shard_size=20_000)
    single = tmp_path / "one"
    single.mkdir()
    (single / "config.json").write_text(config.to_json_string())
    save_file(source.state_dict(), single / "model.lzy", compression="zstd")
    for checkpoint in (folder, folder / "lazystore.index.json", single):
        model = load_checkpoint_and_dispatch(om.meta_gpt2(config), checkpoint, device_map=om.ALL_ON_DISK)
        assert torch.equal(om.logits(model, om.tokens()), reference)


@pytest.mark.slow
def test_other_checkpoints_go_to_accelerate(minilm_files, ids):
    config, state, files = minilm_files
    model = transformers.BertModel(config).eval()
    load_checkpoint_in_model(model, str(files["safetensors"]))
    assert torch.equal(model.embeddings.word_embeddings.weight, state["embeddings.word_embeddings.weight"])


@pytest.mark.slow
def test_a_damaged_lazystore_checkpoint_gets_lazystores_error(minilm_files, tmp_path):
    config, _, files = minilm_files
    cut = tmp_path / "cut.lzy"
    cut.write_bytes(files[None].read_bytes()[:-100])
    with pytest.raises(ls.FormatError, match=str(cut)):
        load_checkpoint_and_dispatch(meta_bert(config), cut, **AUTO)
    unnamed = tmp_path / "weights.bin"  # lazystore bytes under another name: told by the magic
    unnamed.write_bytes(files[None].read_bytes()[:-100])
    with pytest.raises(ls.FormatError, match=str(unnamed)):
        load_checkpoint_in_model(meta_bert(config), unnamed)
    with pytest.raises(ls.InvalidInputError, match="offload_8bit_bnb"):
        load_checkpoint_in_model(meta_bert(config), files[None], device_map={"": "disk"}, offload_8bit_bnb=True)


@pytest.mark.slow
@pytest.mark.parametrize("offload_buffers", [False, True])
def test_buffers_of_disk_modules_get_the_files_values(tmp_path, offload_buffers):
    # BatchNorm's running statistics are persistent buffers: a disk module's
    # must come from the checkpoint, kept in memory or read with its weights.
    torch.manual_seed(0)
    source = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4))
    source.train()
    source(torch.randn(32, 8))  # running statistics that are not the initial ones
    source.eval()
    x = torch.randn(5, 8)
    with torch.no_grad():
        expected = source(x)
    path = tmp_path / "bn.lzy"
    save_file(source.state_dict(), path)
    with accelerate.init_empty_weights():
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4)).eval()
    model = load_checkpoint_and_dispatch(model, path, device_map={"0": "cpu", "1": "disk", "2": "disk"},
                                         offload_buffers=offload_buffers)
    with torch.no_grad():
        assert torch.equal(model(x), expected)
