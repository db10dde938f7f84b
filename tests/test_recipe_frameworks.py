"""The report's departures section checks every framework item against its official script, and the
paper sets train the frameworks with the official values (the values written out here from the scripts,
not read back from the project's own table)."""

from __future__ import annotations

from pathlib import Path

import yaml

from focalcse.config import load_params
from focalcse.paramsets import compose_set, load_any
from focalcse.report.recipe import recipe

REPO = Path(__file__).resolve().parents[1]


def _frameworks_params(tmp_path: Path, **frameworks: dict) -> Path:
    raw = compose_set(REPO, "frameworks")
    for name, values in frameworks.items():
        raw["frameworks"][name] = {**raw["frameworks"][name], **values}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_paper_sets_train_promptbert_and_diffcse_with_the_official_values() -> None:
    # paper-frameworks extends paper (its Focal-InfoNCE tau 0.07 on BERT-base): the frameworks' own
    # official values are paper.yaml's frameworks section, which every set extending paper reads
    for name, focal_tau in (("params/paper-frameworks.yaml", 0.07),):
        p = load_any(REPO / name)
        b = "bert-base-uncased"
        # kongds/Prompt-BERT run.sh unsup-bert: BATCH=256, EPOCH=1, LR=1e-5, --max_seq_length 32, --temp 0.05
        pb = p.train_config(b, "infonce", 1, "promptbert")
        assert (pb.batch_size, pb.lr, pb.epochs, pb.max_steps, pb.max_seq_len) == (256, 1e-5, 1, 0, 32)
        assert pb.temperature == 0.05 and pb.eval_steps == 125
        assert (
            p.train_config(b, "focal_infonce", 1, "promptbert").temperature == focal_tau
        )  # the set's reading
        assert p.framework_settings("promptbert")["denoise"] is True
        assert p.framework_settings("promptbert")["eval_denoise"] is False  # evaluation.py: no delta
        # voidism/DiffCSE run_diffcse.sh: LR=7e-6, 2 epochs, batch 64, max_seq_length 32, temp 0.05
        dc = p.train_config(b, "infonce", 1, "diffcse")
        assert (dc.batch_size, dc.lr, dc.epochs, dc.max_seq_len, dc.temperature) == (64, 7e-6, 2, 32, 0.05)
        # the departures section then finds nothing to say about either framework's recipe
        r = recipe(p)
        assert not any("PromptBERT items" in d or "DiffCSE items" in d for d in r.departures), r.departures
        assert any(m.startswith("PromptBERT items as") and "batch 256, lr 1e-05" in m for m in r.matches)


def test_frameworks_run_departures_name_each_framework_item(tmp_path) -> None:
    r = recipe(load_any(REPO / "params/frameworks.yaml"))
    text = " ".join(r.departures)
    pb = next(d for d in r.departures if d.startswith("PromptBERT items"))
    assert "max_steps 64" in pb and "64 / 3e-05 (official: 256 / 1e-05)" in pb
    dc = next(d for d in r.departures if d.startswith("DiffCSE items"))
    assert (
        "max_steps 64" in dc and "(official: 2 epoch(s)" in dc and "64 / 3e-05 (official: 64 / 7e-06)" in dc
    )
    assert "distilbert-base-uncased" in dc
    # "one epoch" and the batch/lr match are claimed for SimCSE's items only
    assert all(m.startswith("SimCSE items") for m in r.matches if "epoch" in m and "items as" not in m)
    assert "test sets scored *with*" not in text
    # denoised test scoring is reported as a variant; a changed lambda / mask ratio as a departure
    r2 = recipe(
        load_params(
            _frameworks_params(
                tmp_path,
                promptbert={"eval_denoise": True},
                diffcse={"lambda_weight": 0.1, "mask_ratio": 0.15},
            )
        )
    )
    pb2 = next(d for d in r2.departures if d.startswith("PromptBERT items"))
    dc2 = next(d for d in r2.departures if d.startswith("DiffCSE items"))
    assert "with* template denoising" in pb2 and "a variant" in pb2
    assert "lambda_weight 0.1 (official: 0.005)" in dc2 and "mask_ratio 0.15 (official: 0.3)" in dc2


def test_the_default_has_no_framework_lines() -> None:
    r = recipe(load_params(REPO / "params.yaml"))
    assert not any("items" in x for x in r.departures + r.matches)


def test_the_framework_notes_label_denoised_test_scoring_a_variant(tmp_path) -> None:
    from focalcse.report.sections import framework_notes

    official = " ".join(framework_notes(load_any(REPO / "params/frameworks.yaml")))
    assert "The test sets are scored without template denoising" in official and "Variant" not in official
    variant = " ".join(
        framework_notes(load_params(_frameworks_params(tmp_path, promptbert={"eval_denoise": True})))
    )
    assert "**Variant:** the test sets are scored *with* template denoising" in variant
    assert "not comparable with the published ones" in variant
