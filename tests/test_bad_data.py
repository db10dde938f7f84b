"""Bad data fails loudly: corpus and STS readers name the file and line; property-based reader tests."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from focalcse.data.corpus import CorpusError, read_sentences, sample_sentences
from focalcse.data.sts import StsDataError, read_stsb

REPO = Path(__file__).resolve().parents[1]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# ---------------------------------------------------------------- corpus
def test_missing_empty_blank_corpus(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="not found"):
        read_sentences(tmp_path / "none.txt")
    for name, content in (("empty.txt", b""), ("blank.txt", b"\n  \n\t\n")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(CorpusError, match=rf"{name}: no non-blank sentence"):
            read_sentences(tmp_path / name)


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.txt.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"fine line\nanother\nbad \xff\xfe byte\n")
    with pytest.raises(CorpusError, match=r"c\.txt\.gz:3: invalid UTF-8"):
        read_sentences(path)


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "c.txt.gz"
    path.write_bytes(gzip.compress(b"a sentence\n" * 1000)[:50])
    with pytest.raises(CorpusError, match="cannot read"):
        read_sentences(path)


def test_sample_larger_than_corpus() -> None:
    with pytest.raises(CorpusError, match=r"num_sentences=5 but the corpus has only 3"):
        sample_sentences(["a", "b", "c"], 5, seed=0)


def test_sample_is_seeded_and_without_replacement() -> None:
    corpus = [f"s{i}" for i in range(100)]
    a, b = sample_sentences(corpus, 30, 1), sample_sentences(corpus, 30, 1)
    assert a == b and len(set(a)) == 30 and a != sample_sentences(corpus, 30, 2)
    assert a == sorted(a, key=corpus.index)  # corpus order kept


@FAST
@given(st.lists(st.binary(max_size=40), max_size=30))
def test_read_sentences_property(tmp_path_factory, lines: list[bytes]) -> None:
    path = tmp_path_factory.mktemp("corpus") / "c.txt"
    raw = b"\n".join(lines)
    path.write_bytes(raw)
    try:
        got = read_sentences(path)
    except CorpusError as err:
        assert str(path) in str(err)
        return
    expected = [x.decode("utf-8").strip() for x in raw.splitlines()]
    assert got == [x for x in expected if x]


def test_sample_stage_on_a_bad_corpus_fails_and_writes_nothing(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror" / "corpus"
    mirror.mkdir(parents=True)
    with gzip.open(mirror / "wiki1m_standin.txt.gz", "wb") as f:
        f.write(b"one\ntwo\n\xc3\x28 broken\n")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["mirror"] = str(tmp_path / "mirror")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {k: v for k, v in os.environ.items() if k != "FOCALCSE_DATA_MIRROR"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "stages/sample.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "wiki1m_standin.txt.gz:3: invalid UTF-8" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "data").exists()


# ---------------------------------------------------------------- STS
SENT = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\t\x85"),
    min_size=1,
    max_size=30,
).filter(lambda s: s.strip())
ROW = st.tuples(SENT, SENT, st.floats(0, 5, allow_nan=False))


def _stsb(folder: Path, rows: list[tuple[str, str, str]]) -> Path:
    d = folder / "STS" / "STSBenchmark"
    d.mkdir(parents=True, exist_ok=True)
    (d / "sts-test.csv").write_text(
        "\n".join(f"g\tf\ty\t{i:04d}\t{y}\t{a}\t{b}" for i, (a, b, y) in enumerate(rows)) + "\n",
        encoding="utf-8",
    )
    return folder


@FAST
@given(st.lists(ROW, min_size=1, max_size=20))
def test_stsb_reader_round_trip(tmp_path_factory, rows) -> None:
    root = _stsb(tmp_path_factory.mktemp("stsb"), [(a, b, repr(y)) for a, b, y in rows])
    split = read_stsb(root, "test", check_counts=False)
    s1, s2, scores = split.subsets["test"]
    assert scores == [y for _, _, y in rows]
    assert s1 == [" ".join(a.split()) for a, _, _ in rows] and s2 == [" ".join(b.split()) for _, b, _ in rows]


@FAST
@given(st.lists(ROW, min_size=2, max_size=20), st.data())
def test_stsb_reader_names_the_bad_line(tmp_path_factory, rows, data) -> None:
    bad_at = data.draw(st.integers(0, len(rows) - 1))
    bad = data.draw(st.sampled_from(["", "n/a", "5.5", "-0.1", "nan", "1e9"]))
    cells = [(a, b, repr(y)) for a, b, y in rows]
    cells[bad_at] = (cells[bad_at][0], cells[bad_at][1], bad)
    root = _stsb(tmp_path_factory.mktemp("stsb"), cells)
    with pytest.raises(StsDataError, match=rf"sts-test\.csv:{bad_at + 1}: score"):
        read_stsb(root, "test", check_counts=False)


def test_prepare_sts_stage_with_a_truncated_file_fails(tmp_path: Path, senteval_dir: Path) -> None:
    import shutil

    mirror = tmp_path / "mirror" / "senteval" / "downstream"
    shutil.copytree(senteval_dir, mirror)
    gs = mirror / "STS" / "STS13-en-test" / "STS.gs.FNWN.txt"
    gs.write_text("\n".join(gs.read_text().splitlines()[:-5]) + "\n")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["mirror"] = str(tmp_path / "mirror")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {k: v for k, v in os.environ.items() if k != "FOCALCSE_DATA_MIRROR"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "stages/prepare_sts.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "STS.input.FNWN.txt: 189 lines but" in proc.stderr and "must match line by line" in proc.stderr
    assert not (tmp_path / "data" / "sts").exists()
