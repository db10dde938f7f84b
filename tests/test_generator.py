"""DiffCSE's generator: the small MLM the ``pretrain_generator`` stage trains (core/frameworks/diffcse.py,
steps/pretrain_generator.py, stages/pretrain_generator.py).

A tiny GeneratorConfig (hidden 32, 1 layer, 2 heads, batch 8) with the MiniLM tokenizer and a corpus
of a few sentences written to tmp_path; each training run takes well under a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from focalcse.config import FrameworksConfig, Params, SweepConfig
from focalcse.core.frameworks.settings.diffcse import DiffCSEConfig, GeneratorConfig
from focalcse.core.generator import RECORD_FILE, pretrain_mlm
from focalcse.layout import Layout
from focalcse.steps import pretrain_generator
from focalcse.steps.pretrain_generator import generator_source

REPO = Path(__file__).resolve().parents[1]
BACKBONE = "all-MiniLM-L6-v2"
TINY = GeneratorConfig(hidden=32, layers=1, heads=2, steps=3, batch_size=8)
SENTENCES = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "the man plays the guitar",
    "two birds fly over the sea",
]


def write_corpus(path: Path, repeats: int = 6) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = SENTENCES * repeats
    path.write_text("\n".join(lines[:5]) + "\n\n" + "\n".join(lines[5:]) + "\n")  # one blank line, dropped
    return path


def make_params(frameworks: tuple[str, ...] = ("diffcse",), generator: str = "", pretrain=TINY) -> Params:
    return Params(
        sweep=SweepConfig(frameworks=frameworks, backbones=(BACKBONE,)),
        frameworks=FrameworksConfig((("diffcse", DiffCSEConfig(generator=generator, pretrain=pretrain)),)),
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory, minilm_path):
    """One tiny 3-step generator: (folder, record, corpus file)."""
    root = tmp_path_factory.mktemp("generator")
    corpus = write_corpus(root / "corpus.txt")
    out = root / "mlm"
    record = pretrain_mlm(corpus, minilm_path, TINY, out, progress=False)
    return out, record, corpus


# ---------------------------------------------------------------- the trained folder
def test_folder_loads_as_masked_lm_with_the_tokenizers_vocab(trained, minilm_tokenizer):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out, _, _ = trained
    assert {"config.json", "model.safetensors", RECORD_FILE} <= {p.name for p in out.iterdir()}
    assert not list(out.parent.glob(f".{out.name}.*"))  # no staging folder left behind
    model, info = AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert type(model).__name__ == "BertForMaskedLM"
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (32, 1, 2)
    assert cfg.intermediate_size == 128 and cfg.max_position_embeddings == 512
    assert cfg.vocab_size == len(minilm_tokenizer) and cfg.pad_token_id == minilm_tokenizer.pad_token_id
    assert AutoTokenizer.from_pretrained(out).get_vocab() == minilm_tokenizer.get_vocab()
    enc = minilm_tokenizer(["the [MASK] sat on the mat"], return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape == (1, enc["input_ids"].shape[1], len(minilm_tokenizer))
    assert torch.isfinite(logits).all()


def test_record(trained, minilm_path):
    out, record, corpus = trained
    written = json.loads((out / RECORD_FILE).read_text())
    timings = {"train_seconds", "wall_seconds"}
    assert written == json.loads(json.dumps({k: v for k, v in record.items() if k not in timings}))
    assert record["pretrained"] is True
    assert record["config"] == asdict(TINY)
    assert "tokenizer_source" not in record  # a resolved site-packages path: the step records the name
    assert record["corpus"] == {
        "file": str(corpus),
        "sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
        "sentences": len(SENTENCES) * 6,  # the blank line dropped
    }
    assert record["steps"] == 3 and record["final_loss_window"] == 3
    assert 0 < record["final_loss"] < 20 and record["train_seconds"] > 0
    assert "meta" not in record  # core records no provenance; the step adds it (extra)


def test_loss_decreases_and_is_deterministic(tmp_path, minilm_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    cfg = GeneratorConfig(hidden=32, layers=1, heads=2, steps=30, batch_size=8, lr=2e-3)
    first = pretrain_mlm(corpus, minilm_path, cfg, tmp_path / "a", progress=False)
    again = pretrain_mlm(corpus, minilm_path, cfg, tmp_path / "b", progress=False)
    assert first["first_loss"] == pytest.approx(10.3, abs=0.3)  # ~ln(30522): uniform over the vocabulary
    assert first["final_loss"] < first["first_loss"] - 0.5
    assert (first["first_loss"], first["final_loss"]) == (again["first_loss"], again["final_loss"])
    from safetensors.torch import load_file

    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- the step
def _folder_md5(folder: Path) -> str:
    """One md5 over every file's relative name and bytes, as DVC's folder hash depends on both."""
    h = hashlib.md5()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("framework", ["simcse", "diffcse"])
def test_a_rerun_leaves_the_generator_folder_byte_identical(tmp_path, monkeypatch, minilm_path, framework):
    """The folder every train item depends on is the same on a rerun with the same inputs, at another
    commit and with other timings; only the meta file, which nothing depends on, records those."""
    layout = Layout.at(tmp_path)
    write_corpus(layout.corpus_file)
    params = make_params(("simcse", "diffcse"))
    folder = layout.generator_dir(framework, BACKBONE)
    pretrain_generator.run(params, layout, framework, BACKBONE, progress=False)
    first, first_meta = _folder_md5(folder), layout.generator_meta_file(framework, BACKBONE).read_text()
    monkeypatch.setattr(pretrain_generator, "git_commit", lambda *a, **k: "another-commit")
    monkeypatch.setattr("focalcse.provenance.git_commit", lambda *a, **k: "another-commit")
    pretrain_generator.run(params, layout, framework, BACKBONE, progress=False)
    assert _folder_md5(folder) == first
    again_meta = layout.generator_meta_file(framework, BACKBONE).read_text()
    assert again_meta != first_meta and "another-commit" in again_meta


def test_step_trains_when_diffcse_uses_its_own_generator(tmp_path, minilm_path):
    layout = Layout.at(tmp_path)
    write_corpus(layout.corpus_file)
    params = make_params()
    record = pretrain_generator.run(params, layout, "diffcse", BACKBONE, progress=False)
    folder = layout.generator_dir("diffcse", BACKBONE)
    assert record["pretrained"] is True and record["backbone"] == BACKBONE
    assert record["backbone_source"] == BACKBONE
    assert {"git_commit", "versions", "hardware"} <= set(record["meta"])
    # the folder the train items depend on holds no commit or timing; those are in the meta file
    written = json.loads((folder / RECORD_FILE).read_text())
    assert not {"meta", "train_seconds", "wall_seconds"} & set(written)
    meta = json.loads(layout.generator_meta_file("diffcse", BACKBONE).read_text())
    assert meta["meta"] == record["meta"] and meta["wall_seconds"] == record["wall_seconds"] > 0
    assert generator_source(params, layout, "diffcse", BACKBONE) == str(folder)
    # other pretrain settings than the folder was trained with: stale, the stage must run again
    changed = make_params(pretrain=GeneratorConfig(hidden=32, layers=1, heads=2, steps=4, batch_size=8))
    with pytest.raises(FileNotFoundError, match="pretrain_generator"):
        generator_source(changed, layout, "diffcse", BACKBONE)


@pytest.mark.parametrize(
    ("framework", "generator", "reason"),
    [
        ("promptbert", "", "promptbert needs no generator"),
        ("simcse", "", "simcse needs no generator"),  # the matrix is every framework x backbone
        ("diffcse", "org/some-mlm", "frameworks.diffcse.generator"),
    ],
)
def test_step_without_training_writes_only_the_record(tmp_path, framework, generator, reason):
    layout = Layout.at(tmp_path)
    folder = layout.generator_dir(framework, BACKBONE)
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_text("stale")  # an earlier trained model does not linger
    params = make_params((framework,), generator)
    record = pretrain_generator.run(params, layout, framework, BACKBONE, progress=False)
    assert [p.name for p in folder.iterdir()] == [RECORD_FILE]
    written = json.loads((folder / RECORD_FILE).read_text())
    meta = json.loads(layout.generator_meta_file(framework, BACKBONE).read_text())
    assert {**written, **meta} == record and "meta" not in written
    assert written["pretrained"] is False and written["generator"] == generator
    assert reason in written["reason"]
    assert {"git_commit", "versions"} <= set(meta["meta"])
    if generator:
        assert generator_source(params, layout, "diffcse", BACKBONE) == generator


def test_step_without_training_imports_no_torch(tmp_path):
    code = (
        "import sys\n"
        "from focalcse.config import Params\n"
        "from focalcse.layout import Layout\n"
        "from focalcse.steps import pretrain_generator\n"
        f"pretrain_generator.run(Params(), Layout.at({str(tmp_path)!r}), 'promptbert', 'all-MiniLM-L6-v2')\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)
    assert (Layout.at(tmp_path).generator_dir("promptbert", BACKBONE) / RECORD_FILE).is_file()


@pytest.mark.parametrize("state", ["missing", "empty", "record_only", "no_weights"])
def test_generator_source_names_the_stage_when_no_model(tmp_path, state):
    layout = Layout.at(tmp_path)
    folder = layout.generator_dir("diffcse", BACKBONE)
    if state != "missing":
        folder.mkdir(parents=True)
    if state in ("record_only", "no_weights"):
        pretrained = state == "no_weights"
        (folder / RECORD_FILE).write_text(json.dumps({"pretrained": pretrained, "config": asdict(TINY)}))
    if state == "no_weights":
        (folder / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError) as err:
        generator_source(make_params(), layout, "diffcse", BACKBONE)
    message = str(err.value)
    assert "pretrain_generator" in message and BACKBONE in message and str(folder) in message
    if state == "no_weights":
        assert "model.safetensors" in message


# ---------------------------------------------------------------- the stage
def test_stage_entry_point(tmp_path):
    (tmp_path / "params.yaml").write_text("sweep:\n  backbones: [all-MiniLM-L6-v2]\n")
    env = {**os.environ, "FOCALCSE_PARAMS": str(tmp_path / "params.yaml")}
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "stages" / "pretrain_generator.py"),
            "promptbert",
            BACKBONE,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    record_file = Layout.at(tmp_path).generator_dir("promptbert", BACKBONE) / RECORD_FILE
    assert json.loads(record_file.read_text())["pretrained"] is False
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pretrain_generator promptbert-{BACKBONE}: ")
    assert "generator.json" in lines[0]
