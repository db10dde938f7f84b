"""The recorded config is what ran: ``focalcse config``, MLflow's params (``Params.effective_config``) and
a train item's ``*.meta.json`` give the forward the training loop took (``unpad``) and the sentence
vector the framework reads (``pooler``), for SimCSE on a supported and an unsupported backbone and for
the frameworks, which train padded."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from test_training import _sentence

import focalcse.steps.train as train_step
from focalcse.config import load_params
from focalcse.core.backbones import backbone_config, unpad_unsupported_config
from focalcse.data.sts import StsSplit, write_prepared
from focalcse.layout import TrainItem
from focalcse.testing.project import REPO, save_tiny_backbone


def _sentences(rng: random.Random, n: int) -> list[str]:
    return [_sentence(rng) for _ in range(n)]


def _distilbert_backbone(folder: Path) -> Path:
    """A tiny random DistilBERT (an architecture the unpadded forward does not cover)."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from focalcse.core.model import resolve_backbone

    tok = AutoTokenizer.from_pretrained(resolve_backbone("all-MiniLM-L6-v2"))
    config = AutoConfig.for_model(
        "distilbert", vocab_size=tok.vocab_size, dim=32, n_layers=1, n_heads=2, hidden_dim=64
    )
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def item_inputs(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("recorded")
    rng = random.Random(0)
    corpus = root / "train.txt"
    corpus.write_text("\n".join(_sentences(rng, 48)) + "\n")
    s1, s2 = _sentences(rng, 20), _sentences(rng, 20)
    gold = [round(5.0 * (i + 0.5) / 20, 3) for i in range(20)]
    sts = root / "sts"
    write_prepared([("STSBenchmark-dev", StsSplit("STSBenchmark", {"dev": (s1, s2, gold)}))], sts, "test")
    return corpus, sts, root


def _params(tmp_path: Path, source: Path, framework: str):
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["backbone_overrides"] = {"tiny": {"source": str(source)}}
    raw["sweep"] = {
        "backbones": ["tiny"],
        "losses": ["infonce", "focal_infonce"],
        "seeds": [1],
        "frameworks": ["simcse"]
        if framework == "simcse"
        else ["simcse", framework],  # every one trains "tiny"
    }
    raw["train"] = {**raw["train"], "batch_size": 8, "max_steps": 2, "eval_steps": 2, "precision": "fp32"}
    raw["train"].update(lr=1e-3, max_seq_len=16)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_params(path)


@pytest.mark.parametrize(
    ("framework", "arch", "unpad", "pooler"),
    [
        ("simcse", "bert", True, "cls"),  # the CPU default's case: recorded exactly as configured
        ("simcse", "distilbert", False, "cls"),  # train.unpad true, but the backbone has no unpadded forward
        ("promptbert", "bert", False, "mask"),  # frameworks train padded; the vector is the mask token
    ],
)
def test_meta_json_and_effective_config_record_the_path_the_trainer_took(
    item_inputs, tmp_path, monkeypatch, framework, arch, unpad, pooler
) -> None:
    corpus, sts, root = item_inputs
    folder = root / arch
    if not folder.is_dir():
        save_tiny_backbone(folder) if arch == "bert" else _distilbert_backbone(folder)
    params = _params(tmp_path, folder, framework)
    cfg = params.train_config("tiny", "infonce", 1, framework)
    assert cfg.unpad is True and cfg.pooler == "cls"  # what the params ask for
    seen = {}
    loop = train_step.train

    def spy(encoder, *args, **kwargs):
        result = loop(encoder, *args, **kwargs)
        seen.update(unpad=encoder.unpad, encoder=encoder)  # set by the loop's _setup
        return result

    monkeypatch.setattr(train_step, "train", spy)
    item = TrainItem(
        corpus_file=corpus,
        sts_dir=sts,
        model_dir=tmp_path / "model",
        metrics_file=tmp_path / "m.json",
        curve_file=tmp_path / "curve.json",
        dev_file=tmp_path / "dev.json",
        prepared_dir=tmp_path / "prepared",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = train_step.train_item(params, cfg, "tiny", item, progress=False, framework=framework)
    assert any("distilbert" in str(w.message) for w in caught) == (arch == "distilbert")
    recorded = metrics["meta"]["train_config"]
    effective = params.effective_config("tiny", "infonce", 1, framework)
    assert seen["unpad"] is unpad and recorded["unpad"] is unpad and effective["unpad"] is unpad
    assert recorded["pooler"] == effective["pooler"] == pooler
    assert recorded == {k: v for k, v in effective.items() if k != "framework"}
    assert list(recorded) == list(cfg.to_dict())  # same keys, same order
    if framework == "simcse" and unpad:
        assert recorded == cfg.to_dict()  # an item that runs as configured records exactly its config
    # a framework with settings of its own records them; SimCSE, which has none, records no framework
    own = framework != "simcse"
    assert ("framework" in metrics["meta"]) is own and ("framework" in effective) is own
    saved = json.loads((item.model_dir / "focalcse.json").read_text())
    assert ("framework" in saved) is own
    if own:
        assert metrics["meta"]["framework"]["name"] == saved["framework"]["name"] == framework
    if framework == "promptbert":
        _assert_vector_is_the_mask_token(seen["encoder"])


def _assert_vector_is_the_mask_token(encoder) -> None:
    """PromptBERT's sentence vector is the backbone's last hidden state at the template's mask token
    (``pooler: mask``; the MLP only in training), not at [CLS] (what ``cls`` would say)."""
    encoder.eval()
    ids = encoder.sentence_ids(["the river runs by the city"])[0]
    pos = ids.index(encoder.mask_id)
    input_ids = torch.tensor([ids])
    mask = torch.ones_like(input_ids)
    with torch.no_grad():
        hidden = encoder.backbone(input_ids=input_ids, attention_mask=mask).last_hidden_state[0]
        vector = encoder(input_ids=input_ids, attention_mask=mask)[0]
    assert pos > 0
    torch.testing.assert_close(vector, hidden[pos])
    assert not torch.allclose(vector, hidden[0])


def test_promptbert_names_its_mask_vector_for_both_poolers(tmp_path) -> None:
    params = load_params(REPO / "params.yaml")
    settings = params.frameworks.settings("promptbert")
    assert settings.recorded_pooler("cls") == "mask"  # mask token + SimCSE's MLP in training
    assert settings.recorded_pooler("cls_before_pooler") == "mask_before_pooler"  # no MLP


def test_the_config_check_matches_the_shipped_backbone_and_refuses_other_architectures() -> None:
    minilm = backbone_config("all-MiniLM-L6-v2")
    assert minilm is not None and unpad_unsupported_config(minilm) is None
    assert "distilbert" in unpad_unsupported_config({"model_type": "distilbert"})
    assert "decoder" in unpad_unsupported_config({"model_type": "bert", "is_decoder": True})
    assert "relative_key" in unpad_unsupported_config(
        {"model_type": "roberta", "position_embedding_type": "relative_key"}
    )
    assert backbone_config("./no/such/folder") is None  # unreadable: the requested value is shown
