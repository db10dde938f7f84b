"""The check stage fingerprints the sources by content and parses them only when the fingerprint
changed: an identical copy behind another mirror path changes nothing, a changed file changes exactly
its own fingerprint, a malformed one fails in one line with the recorded fingerprint kept."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from focalcse.config import load_params
from focalcse.data.sources import MIRROR_ENV
from focalcse.errors import CorpusError, StsDataError
from focalcse.layout import Layout
from focalcse.steps import check

REPO = Path(__file__).resolve().parents[1]


def _mirror(dest: Path, senteval: Path, sentences: int = 300) -> Path:
    (dest / "corpus").mkdir(parents=True)
    lines = [f"sentence number {i} of the small test corpus ." for i in range(sentences)]
    (dest / "corpus" / "wiki1m_for_simcse.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    shutil.copytree(senteval, dest / "senteval" / "downstream")
    return dest


def _params(tmp_path: Path) -> Path:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["data"]["num_sentences"] = 256
    raw["train"].update(batch_size=32, eval_steps=4)
    raw["ablation"].update(temperatures=[], ms=[])
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sources_are_parsed_only_when_their_bytes_change(tmp_path, senteval_dir, monkeypatch) -> None:
    params = load_params(_params(tmp_path))
    layout = Layout.at(tmp_path / "project")
    a = _mirror(tmp_path / "a", senteval_dir)
    monkeypatch.setenv(MIRROR_ENV, str(a))

    first = check.run(params, layout)
    assert first["parsed"] == ["corpus", "sts"] and first["corpus_sentences"] == 300
    corpus_fp = json.loads(layout.corpus_sources_file.read_text())
    assert corpus_fp["sha256"] == _sha(a / "corpus" / "wiki1m_for_simcse.txt")  # content, independently
    sts_fp = json.loads(layout.sts_sources_file.read_text())
    sick = "SICK/SICK_test_annotated.txt"
    assert sts_fp["files"][sick] == _sha(senteval_dir / sick)
    assert str(tmp_path) not in layout.corpus_sources_file.read_text() + layout.sts_sources_file.read_text()
    stamps = {p: p.stat().st_mtime_ns for p in (layout.corpus_sources_file, layout.sts_sources_file)}

    # the same bytes behind another path: nothing parsed, nothing rewritten
    b = tmp_path / "elsewhere" / "b"
    shutil.copytree(a, b)
    monkeypatch.setenv(MIRROR_ENV, str(b))
    again = check.run(params, layout)
    assert again["parsed"] == [] and again["corpus_sentences"] == 300
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps

    # a data-dependent refusal still applies on the recorded count, without a parse
    raw = yaml.safe_load(_params(tmp_path).read_text())
    raw["data"]["num_sentences"] = 301
    (tmp_path / "more.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    too_many = load_params(tmp_path / "more.yaml")
    with pytest.raises(CorpusError, match="corpus has only 300 non-blank sentences"):
        check.run(too_many, layout)

    # one STS file changed (still valid): only the STS fingerprint is parsed and rewritten
    stsb = b / "senteval" / "downstream" / "STS" / "STSBenchmark" / "sts-test.csv"
    rows = stsb.read_text(encoding="utf-8").split("\n")
    rows[0] += " indeed"  # the first pair's second sentence, one word longer
    stsb.write_text("\n".join(rows), encoding="utf-8")
    changed = check.run(params, layout)
    assert changed["parsed"] == ["sts"]
    assert layout.corpus_sources_file.stat().st_mtime_ns == stamps[layout.corpus_sources_file]
    assert json.loads(layout.sts_sources_file.read_text())["files"]["STS/STSBenchmark/sts-test.csv"] == _sha(
        stsb
    )

    # a malformed file: one line, and the last good fingerprint stays
    before = layout.sts_sources_file.read_bytes()
    lines = stsb.read_text(encoding="utf-8").splitlines()
    stsb.write_text("\n".join(lines[:-5]) + "\n", encoding="utf-8")  # pairs missing
    with pytest.raises(StsDataError) as err:
        check.run(params, layout)
    assert "\n" not in str(err.value) and "STSBenchmark" in str(err.value)
    assert layout.sts_sources_file.read_bytes() == before
