"""STS readers: real-data counts, blank gold lines, error messages, prepared files, both layouts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from focalcse.data.sts import (
    StsDataError,
    StsSplit,
    is_prepared,
    read_prepared,
    read_sick,
    read_stsb,
    write_prepared,
)
from focalcse.data.tasks import TASKS, load_split, read_task

# The counts of shared/data/README.md (SentEval's), written out here independently of focalcse.data.sts.
EXPECTED_SUBSETS = {
    "STS12": {
        "MSRpar": 750,
        "MSRvid": 750,
        "SMTeuroparl": 459,
        "surprise.OnWN": 750,
        "surprise.SMTnews": 399,
    },
    "STS13": {"FNWN": 189, "headlines": 750, "OnWN": 561},
    "STS14": {
        "deft-forum": 450,
        "deft-news": 300,
        "headlines": 750,
        "images": 750,
        "OnWN": 750,
        "tweet-news": 750,
    },
    "STS15": {"answers-forums": 375, "answers-students": 750, "belief": 375, "headlines": 750, "images": 750},
    "STS16": {
        "answer-answer": 254,
        "headlines": 249,
        "plagiarism": 230,
        "postediting": 244,
        "question-question": 209,
    },
}
EXPECTED_TOTALS = {
    "STS12": 3108,
    "STS13": 1500,
    "STS14": 3750,
    "STS15": 3000,
    "STS16": 1186,
    "STSBenchmark": 1379,
    "SICKRelatedness": 4927,
}


def _consistent(split: StsSplit) -> None:
    for subset, (s1, s2, scores) in split.subsets.items():
        assert len(s1) == len(s2) == len(scores), subset
        assert all(isinstance(s, str) and s == " ".join(s.split()) for s in s1 + s2)


# ---------------------------------------------------------------- real data
@pytest.mark.parametrize("task", list(EXPECTED_TOTALS))
def test_real_task_counts(senteval_dir: Path, task: str) -> None:
    split = read_task(senteval_dir, task)
    assert split.name == task
    assert len(split) == EXPECTED_TOTALS[task]
    if task in EXPECTED_SUBSETS:
        assert {k: len(v[2]) for k, v in split.subsets.items()} == EXPECTED_SUBSETS[task]
        lo, hi = 0.0, 5.0
    elif task == "SICKRelatedness":
        lo, hi = 1.0, 5.0
    else:
        lo, hi = 0.0, 5.0
    _consistent(split)
    scores = [y for v in split.subsets.values() for y in v[2]]
    assert min(scores) >= lo and max(scores) <= hi
    assert len(split.sentences()) == 2 * len(split)


@pytest.mark.parametrize(("split", "n"), [("train", 5749), ("dev", 1500), ("test", 1379)])
def test_real_stsb_counts(senteval_dir: Path, split: str, n: int) -> None:
    data = read_stsb(senteval_dir, split)
    assert list(data.subsets) == [split]
    assert len(data) == n
    _consistent(data)


@pytest.mark.parametrize(("split", "n"), [("train", 4500), ("trial", 500), ("test", 4927)])
def test_real_sick_counts(senteval_dir: Path, split: str, n: int) -> None:
    data = read_sick(senteval_dir, split)
    assert len(data) == n
    _consistent(data)
    assert min(data.subsets[split][2]) >= 1.0


def test_real_first_stsb_test_pair(senteval_dir: Path) -> None:
    """Columns are picked right: score from column 5, sentences from 6 and 7."""
    path = senteval_dir / "STS" / "STSBenchmark" / "sts-test.csv"
    cols = path.read_text(encoding="utf-8").splitlines()[0].split("\t")
    s1, s2, y = read_stsb(senteval_dir, "test").subsets["test"]
    assert y[0] == float(cols[4])
    assert s1[0] == " ".join(cols[5].split()) and s2[0] == " ".join(cols[6].split())


def test_count_check_catches_a_wrong_count(tiny_sts_dir: Path) -> None:
    with pytest.raises(StsDataError, match=r"STS12/MSRpar: 8 scored pairs, expected 750"):
        read_task(tiny_sts_dir, "STS12")
    assert len(read_task(tiny_sts_dir, "STS12", check_counts=False)) == 5 * 8


def test_unknown_task_or_split(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown task 'STS11'"):
        read_task(tmp_path, "STS11")
    with pytest.raises(ValueError, match="unknown STS-B split"):
        read_stsb(tmp_path, "validation")
    with pytest.raises(ValueError, match="unknown SICK split"):
        read_sick(tmp_path, "dev")


# ---------------------------------------------------------------- hand-made files
def _write_year(
    root: Path, task: str, subset: str, inp: list[str], gs: list[str], others: bool = True
) -> tuple[Path, Path]:
    """Write one subset's files (and, with ``others``, one valid pair for every other subset)."""
    folder = root / "STS" / f"{task}-en-test"
    folder.mkdir(parents=True, exist_ok=True)
    if others:
        for name in TASKS[task].subsets:
            (folder / f"STS.input.{name}.txt").write_text("x y\tz w\n", encoding="utf-8")
            (folder / f"STS.gs.{name}.txt").write_text("3.0\n", encoding="utf-8")
    pin, pgs = folder / f"STS.input.{subset}.txt", folder / f"STS.gs.{subset}.txt"
    pin.write_text("".join(line + "\n" for line in inp), encoding="utf-8")
    pgs.write_text("".join(line + "\n" for line in gs), encoding="utf-8")
    return pin, pgs


def test_blank_gold_lines_are_skipped(tmp_path: Path) -> None:
    _, _ = _write_year(
        tmp_path,
        "STS13",
        "FNWN",
        ["a  b\tc d\textra column", "unscored\tpair", "e f\tg   h", "x\ty"],
        ["4.2", "", "0", "   "],
    )
    split = read_task(tmp_path, "STS13", check_counts=False)
    s1, s2, y = split.subsets["FNWN"]
    assert s1 == ["a b", "e f"]  # whitespace normalised, extra columns ignored
    assert s2 == ["c d", "g h"]
    assert y == [4.2, 0.0]
    assert len(split) == 2 + 2  # two other subsets with one pair each


def _assert_error(exc: pytest.ExceptionInfo, path: Path, line: int | None) -> None:
    msg = str(exc.value)
    assert str(path) in msg, msg
    if line is not None:
        assert re.search(rf"{re.escape(str(path))}:{line}\b", msg), msg


def test_missing_file(tmp_path: Path) -> None:
    pin, pgs = _write_year(tmp_path, "STS13", "OnWN", ["a\tb"], ["1"])
    pgs.unlink()
    with pytest.raises(StsDataError, match="file not found") as exc:
        read_task(tmp_path, "STS13", check_counts=False)
    _assert_error(exc, pgs, None)
    with pytest.raises(StsDataError, match="file not found") as exc:
        read_stsb(tmp_path, "test")
    _assert_error(exc, tmp_path / "STS" / "STSBenchmark" / "sts-test.csv", None)
    with pytest.raises(StsDataError, match="file not found") as exc:
        read_sick(tmp_path, "test")
    _assert_error(exc, tmp_path / "SICK" / "SICK_test_annotated.txt", None)


def test_empty_file(tmp_path: Path) -> None:
    pin, _ = _write_year(tmp_path, "STS13", "OnWN", [], ["1"])
    pin.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(StsDataError, match="empty") as exc:
        read_task(tmp_path, "STS13", check_counts=False)
    _assert_error(exc, pin, None)


def test_non_numeric_score(tmp_path: Path) -> None:
    _, pgs = _write_year(tmp_path, "STS13", "OnWN", ["a\tb", "c\td", "e\tf"], ["1", "2", "two"])
    with pytest.raises(StsDataError, match="not a number") as exc:
        read_task(tmp_path, "STS13", check_counts=False)
    _assert_error(exc, pgs, 3)


@pytest.mark.parametrize("bad", ["5.5", "-0.1", "nan", "inf"])
def test_out_of_range_score(tmp_path: Path, bad: str) -> None:
    _, pgs = _write_year(tmp_path, "STS13", "OnWN", ["a\tb", "c\td"], ["1", bad])
    with pytest.raises(StsDataError, match="outside") as exc:
        read_task(tmp_path, "STS13", check_counts=False)
    _assert_error(exc, pgs, 2)


def test_sick_score_range_is_1_to_5(tmp_path: Path) -> None:
    sick = tmp_path / "SICK"
    sick.mkdir()
    path = sick / "SICK_test_annotated.txt"
    path.write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\n1\ta\tb\t3.5\n2\tc\td\t0.5\n", encoding="utf-8"
    )
    with pytest.raises(StsDataError, match="outside") as exc:
        read_sick(tmp_path, "test", check_counts=False)
    _assert_error(exc, path, 3)


def test_line_count_mismatch(tmp_path: Path) -> None:
    pin, pgs = _write_year(tmp_path, "STS13", "OnWN", ["a\tb", "c\td", "e\tf"], ["1", "2"])
    with pytest.raises(StsDataError, match="must match line by line") as exc:
        read_task(tmp_path, "STS13", check_counts=False)
    assert str(pin) in str(exc.value) and str(pgs) in str(exc.value)


def test_missing_columns_sts_year(tmp_path: Path) -> None:
    pin, _ = _write_year(tmp_path, "STS13", "OnWN", ["a\tb", "only one sentence"], ["1", "2"])
    with pytest.raises(StsDataError, match="two tab-separated sentences") as exc:
        read_task(tmp_path, "STS13", check_counts=False)
    _assert_error(exc, pin, 2)


def test_missing_columns_stsb(tmp_path: Path) -> None:
    folder = tmp_path / "STS" / "STSBenchmark"
    folder.mkdir(parents=True)
    path = folder / "sts-dev.csv"
    path.write_text("g\tf\ty\t1\t2.0\ta\tb\ng\tf\ty\t2\t3.0\ta\n", encoding="utf-8")
    with pytest.raises(StsDataError, match="at least 7") as exc:
        read_stsb(tmp_path, "dev", check_counts=False)
    _assert_error(exc, path, 2)


def test_missing_columns_and_header_sick(tmp_path: Path) -> None:
    sick = tmp_path / "SICK"
    sick.mkdir()
    path = sick / "SICK_trial.txt"
    path.write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\n1\ta\tb\t3\n2\ta\n", encoding="utf-8"
    )
    with pytest.raises(StsDataError, match="at least 4") as exc:
        read_sick(tmp_path, "trial", check_counts=False)
    _assert_error(exc, path, 3)
    path.write_text("pair_ID\tsentence_A\tsentence_B\tentailment\n1\ta\tb\t3\n", encoding="utf-8")
    with pytest.raises(StsDataError, match="relatedness_score") as exc:
        read_sick(tmp_path, "trial", check_counts=False)
    _assert_error(exc, path, 1)


def test_stsb_score_error_names_line(tmp_path: Path) -> None:
    folder = tmp_path / "STS" / "STSBenchmark"
    folder.mkdir(parents=True)
    path = folder / "sts-train.csv"
    path.write_text("g\tf\ty\t1\t2.0\ta\tb\n\ng\tf\ty\t2\tx\ta\tb\n", encoding="utf-8")
    with pytest.raises(StsDataError, match="not a number") as exc:
        read_stsb(tmp_path, "train", check_counts=False)
    _assert_error(exc, path, 3)


# ---------------------------------------------------------------- prepared files
def _real_splits(senteval_dir: Path) -> list[tuple[str, StsSplit]]:
    keys = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
    return [(k, read_task(senteval_dir, k)) for k in keys] + [
        ("STSBenchmark-dev", read_stsb(senteval_dir, "dev")),
        ("STSBenchmark-train", read_stsb(senteval_dir, "train")),
    ]


def test_prepared_round_trip(senteval_dir: Path, tmp_path: Path) -> None:
    splits = _real_splits(senteval_dir)
    out = tmp_path / "prepared"
    manifest = write_prepared(splits, out, source=str(senteval_dir))
    assert is_prepared(out) and not is_prepared(senteval_dir)
    assert manifest["source"] == str(senteval_dir)
    for key, original in splits:
        assert manifest["files"][key]["pairs"] == len(original)
        back = read_prepared(out, key)
        assert back.name == original.name
        assert back.subsets == original.subsets  # same subsets, order, sentences and exact scores
    with pytest.raises(StsDataError, match="no split 'STS11'"):
        read_prepared(out, "STS11")


def test_prepared_tampering_is_detected(tmp_path: Path) -> None:
    split = StsSplit("STS13", {"FNWN": (["a b", "c"], ["d", "e f"], [1.5, 4.0])})
    out = tmp_path / "prepared"
    write_prepared([("STS13", split)], out, source="test")
    path = out / "STS13.tsv"
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text(lines[0] + "\n", encoding="utf-8")
    with pytest.raises(StsDataError, match="manifest says 2") as exc:
        read_prepared(out, "STS13")
    _assert_error(exc, path, None)
    path.write_text(lines[0] + "\n" + "FNWN\t9.0\tc\td\n", encoding="utf-8")
    with pytest.raises(StsDataError, match="outside") as exc:
        read_prepared(out, "STS13")
    _assert_error(exc, path, 2)


def test_write_prepared_refuses_tabs(tmp_path: Path) -> None:
    split = StsSplit("STS13", {"FNWN": (["a\tb"], ["c"], [1.0])})
    with pytest.raises(StsDataError, match="tab or newline"):
        write_prepared([("STS13", split)], tmp_path / "p", source="test")


def test_load_split_both_layouts(senteval_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "prepared"
    write_prepared(_real_splits(senteval_dir), out, source=str(senteval_dir))
    for key in ("STS14", "STSBenchmark", "STSBenchmark-dev", "STSBenchmark-train", "SICKRelatedness"):
        raw = load_split(senteval_dir, key)
        prepared = load_split(out, key)
        assert raw.subsets == prepared.subsets, key
        assert raw.name == prepared.name
    assert len(load_split(senteval_dir, "STSBenchmark-dev")) == 1500


def test_load_split_check_counts_flag(tiny_sts_dir: Path) -> None:
    with pytest.raises(StsDataError, match="expected 1500"):
        load_split(tiny_sts_dir, "STSBenchmark-dev")
    assert len(load_split(tiny_sts_dir, "STSBenchmark-dev", check_counts=False)) == 12
    assert len(load_split(tiny_sts_dir, "SICKRelatedness", check_counts=False)) == 16
