"""Checkpoints verify themselves on load: a corrupt newest one is moved aside and the previous one used."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
import torch

from focalcse.config import TrainConfig
from focalcse.core.training import Checkpointer, TrainResult, train

CORPUS = [[101, 2000 + i, 2001 + i, 102] for i in range(64)]
FINGERPRINT = {"run": "test"}


def _objects(make):
    enc = make()
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return enc, opt, sched, TrainResult(-1, float("-inf"), 4, 0.0, 0.0, 0.0)


@pytest.fixture
def two_checkpoints(tmp_path: Path, tiny_encoder_factory) -> Path:
    """``work/last`` at step 2 and ``work/previous`` at step 1."""
    enc, opt, sched, result = _objects(tiny_encoder_factory)
    ckpt = Checkpointer(tmp_path / "work" / "last", FINGERPRINT)
    for step in (1, 2):
        with torch.no_grad():
            next(enc.parameters()).add_(1.0)  # distinct weights per checkpoint
        ckpt.save(step, enc, opt, sched, result)
    work = tmp_path / "work"
    assert sorted(p.name for p in work.iterdir() if not p.name.startswith(".")) == ["last", "previous"]
    return work


def _load(work: Path, make) -> tuple[int, Checkpointer]:
    enc, opt, sched, result = _objects(make)
    ckpt = Checkpointer(work / "last", FINGERPRINT)
    return ckpt.load(enc, opt, sched, result), ckpt


def _truncate(path: Path, keep: int = 7) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _flip(path: Path) -> None:  # same size, one byte changed in the middle
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _lines(capsys) -> list[str]:
    out = capsys.readouterr()
    return [line for line in (out.out + out.err).splitlines() if line.strip()]


def test_intact_checkpoints_load_the_newest(two_checkpoints: Path, tiny_encoder_factory, capsys) -> None:
    step, ckpt = _load(two_checkpoints, tiny_encoder_factory)
    assert step == 2 and ckpt.step == 2 and ckpt.folder == two_checkpoints / "last"
    assert _lines(capsys) == []


@pytest.mark.parametrize(
    "defect",
    [
        pytest.param(lambda w: _truncate(w / "last" / "model.safetensors"), id="truncated-model"),
        pytest.param(lambda w: _truncate(w / "last" / "state.pt", 100), id="truncated-state"),
        pytest.param(lambda w: _flip(w / "last" / "state.pt"), id="flipped-state"),
        pytest.param(lambda w: _flip(w / "last" / "model.safetensors"), id="flipped-model"),
        pytest.param(lambda w: (w / "last" / "manifest.json").unlink(), id="no-manifest"),
        pytest.param(lambda w: (w / "last" / "state.pt").unlink(), id="no-state"),
    ],
)
def test_corrupt_newest_falls_back_to_previous(
    two_checkpoints: Path, tiny_encoder_factory, capsys, defect
) -> None:
    defect(two_checkpoints)
    step, ckpt = _load(two_checkpoints, tiny_encoder_factory)
    assert step == 1 and ckpt.step == 1 and ckpt.folder == two_checkpoints / "previous"
    lines = _lines(capsys)
    assert len(lines) == 1, lines
    assert str(two_checkpoints / "last") in lines[0] and "unusable" in lines[0]
    assert not (two_checkpoints / "last").exists()
    aside = two_checkpoints / "last.corrupt-1"
    assert aside.is_dir() and (aside / "model.safetensors").exists()  # moved aside, not deleted


def test_both_corrupt_starts_over(two_checkpoints: Path, tiny_encoder_factory, capsys) -> None:
    _truncate(two_checkpoints / "last" / "model.safetensors")
    _truncate(two_checkpoints / "previous" / "state.pt", 100)
    step, ckpt = _load(two_checkpoints, tiny_encoder_factory)
    assert step == 0 and ckpt.step == 0
    lines = _lines(capsys)
    assert len(lines) == 2 and "last" in lines[0] and "previous" in lines[1]
    assert (two_checkpoints / "last.corrupt-1").is_dir() and (two_checkpoints / "previous.corrupt-1").is_dir()
    assert not (two_checkpoints / "last").exists() and not (two_checkpoints / "previous").exists()


def test_a_second_corruption_gets_a_new_name(two_checkpoints: Path, tiny_encoder_factory, capsys) -> None:
    (two_checkpoints / "last.corrupt-1").mkdir()
    _truncate(two_checkpoints / "last" / "model.safetensors")
    assert _load(two_checkpoints, tiny_encoder_factory)[0] == 1
    assert (two_checkpoints / "last.corrupt-2").is_dir() and "last.corrupt-2" in _lines(capsys)[0]


def _rewrite(folder: Path, name: str, data: bytes) -> None:
    """Replace a checkpoint file and its manifest entry: the file was written that way."""
    (folder / name).write_bytes(data)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_bad_safetensors_header_is_caught(two_checkpoints: Path, tiny_encoder_factory, capsys) -> None:
    """Even with a matching manifest (the file was written bad), the header must parse."""
    model = two_checkpoints / "last" / "model.safetensors"
    _rewrite(two_checkpoints / "last", model.name, b"\xff" * 8 + model.read_bytes()[8:])  # absurd header
    assert _load(two_checkpoints, tiny_encoder_factory)[0] == 1
    assert "header" in _lines(capsys)[0]


class _Touch:
    """Pickles as code: unpickling it would create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _plant_pickled_code(folder: Path, marker: Path) -> None:
    """``state.pt`` keeps its real state plus an object that runs code when unpickled, and the manifest
    matches it: only the weights-only load stands between it and the code."""
    state = torch.load(folder / "state.pt", weights_only=True)
    buffer = io.BytesIO()
    torch.save({**state, "payload": _Touch(marker)}, buffer)
    _rewrite(folder, "state.pt", buffer.getvalue())


def test_pickled_code_in_the_newest_is_moved_aside_unrun(
    two_checkpoints: Path, tiny_encoder_factory, capsys
) -> None:
    marker = two_checkpoints.parent / "pwned"
    _plant_pickled_code(two_checkpoints / "last", marker)
    step, ckpt = _load(two_checkpoints, tiny_encoder_factory)
    assert step == 1 and ckpt.folder == two_checkpoints / "previous" and not marker.exists()
    assert _lines(capsys) == [
        f"checkpoint {two_checkpoints / 'last'} is unusable (state.pt holds pickled code (getattr), refused "
        "by the weights-only load); moved aside to last.corrupt-1"
    ]
    assert (two_checkpoints / "last.corrupt-1" / "state.pt").is_file()


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("stop_after", "damage"),
    [
        (3, lambda last: _truncate(last / "model.safetensors")),
        (5, lambda last: _truncate(last / "model.safetensors")),
        pytest.param(3, lambda last: _plant_pickled_code(last, last.parents[1] / "pwned"), id="3-pickled"),
    ],
)
def test_rerun_after_a_damaged_checkpoint_equals_uninterrupted(
    tmp_path: Path, tiny_encoder_factory, capsys, stop_after: int, damage
) -> None:
    cfg = TrainConfig(batch_size=8, max_steps=7, checkpoint_steps=1, eval_at_start=False, lr=1e-3, seed=2)
    clean = train(tiny_encoder_factory(), CORPUS, cfg, tmp_path / "clean", progress=False)
    work = tmp_path / ".model.work"

    def stop(metrics, step):
        if step == stop_after:
            raise KeyboardInterrupt  # before this step's checkpoint: last = step - 1, previous = step - 2

    with pytest.raises(KeyboardInterrupt):
        train(tiny_encoder_factory(), CORPUS, cfg, tmp_path / "model", log_metrics=stop, progress=False)
    assert (work / "last").is_dir() and (work / "previous").is_dir()
    damage(work / "last")
    capsys.readouterr()
    resumed = train(tiny_encoder_factory(), CORPUS, cfg, tmp_path / "model", progress=True)
    err = capsys.readouterr()
    text = err.out + err.err
    assert f"{work / 'last'} is unusable" in text and f"from step {stop_after - 2}" in text
    assert _md5(tmp_path / "model" / "model.safetensors") == _md5(tmp_path / "clean" / "model.safetensors")
    assert resumed.history == clean.history
    assert not work.exists() and not (tmp_path / "pwned").exists()


def _distance_from(start):
    """A stand-in for STS-B dev that the same weights score the same and that grows as training moves
    the weights away from ``start``'s (each evaluation keeps a new best model)."""
    init = [p.detach().clone() for p in start.parameters()]

    def score(encoder) -> float:
        with torch.no_grad():
            return float(sum((p - q).double().norm() for p, q in zip(encoder.parameters(), init)))

    return score


def test_disk_full_at_the_best_model_names_it_and_the_rerun_resumes(
    tmp_path: Path, tiny_encoder_factory, capsys
) -> None:
    from safetensors import SafetensorError

    from focalcse.errors import DiskFullError, known_failure

    cfg = TrainConfig(batch_size=8, max_steps=6, eval_steps=2, eval_at_start=False, lr=1e-3, seed=2)
    dev = _distance_from(tiny_encoder_factory())
    clean = train(tiny_encoder_factory(), CORPUS, cfg, tmp_path / "clean", dev_evaluator=dev, progress=False)
    assert [c["step"] for c in clean.dev_curve] == [2, 4, 6] and clean.best_step == 6  # a new best each time
    enc = tiny_encoder_factory()
    saves = []
    real_save = enc.backbone.save_pretrained

    def fills_up_at_the_second(folder, **kwargs):  # the step-4 best model: safetensors' own error
        saves.append(folder)
        if len(saves) == 2:
            (Path(folder) / "model.safetensors").write_bytes(b"\0" * 1000)
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real_save(folder, **kwargs)

    enc.backbone.save_pretrained = fills_up_at_the_second
    work = tmp_path / ".model.work"
    with pytest.raises(DiskFullError) as info:
        train(enc, CORPUS, cfg, tmp_path / "model", dev_evaluator=dev, progress=False)
    line = known_failure(info.value)
    assert line.startswith(f"no space left on the device writing {work / 'best'}: ") and "\n" not in line
    assert "free there, the write needs about " in line and line.endswith("; free some space and rerun")
    assert info.value.need >= 1000
    assert sorted(p.name for p in work.iterdir()) == ["best", "last"]  # step 2 both; no half-written folder
    capsys.readouterr()
    resumed = train(tiny_encoder_factory(), CORPUS, cfg, tmp_path / "model", dev_evaluator=dev, progress=True)
    assert f"from step 2 ({work / 'last'})" in capsys.readouterr().out
    assert resumed.best_step == clean.best_step and resumed.history == clean.history
    assert _md5(tmp_path / "model" / "model.safetensors") == _md5(tmp_path / "clean" / "model.safetensors")


def test_disk_full_at_a_checkpoint_keeps_the_last_two(
    two_checkpoints: Path, tiny_encoder_factory, monkeypatch
) -> None:
    import focalcse.atomic
    import focalcse.core.checkpoint
    from focalcse.atomic import tensor_bytes
    from focalcse.errors import DiskFullError

    def torch_save_on_a_full_device(obj, path):  # torch's zip writer names no cause
        Path(path).write_bytes(b"\0" * 100)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    monkeypatch.setattr(focalcse.core.checkpoint.torch, "save", torch_save_on_a_full_device)
    monkeypatch.setattr(focalcse.atomic, "free_bytes", lambda path: 512)
    enc, opt, sched, result = _objects(tiny_encoder_factory)
    with pytest.raises(DiskFullError) as info:
        Checkpointer(two_checkpoints / "last", FINGERPRINT).save(3, enc, opt, sched, result)
    assert str(info.value).startswith(
        f"no space left on the device writing {two_checkpoints / 'last'}: 512 B"
    )
    assert info.value.need >= tensor_bytes(enc.state_dict(), opt.state_dict())  # or what got written, if more
    assert "free there, the write needs about 3.8 MiB;" in str(info.value)
    monkeypatch.undo()
    assert sorted(p.name for p in two_checkpoints.iterdir()) == ["last", "previous"]
    assert _load(two_checkpoints, tiny_encoder_factory)[0] == 2  # both kept whole


def test_killed_mid_rotation_loads_the_previous(two_checkpoints: Path, tiny_encoder_factory, capsys) -> None:
    """A kill after ``last`` became ``previous`` but before the new one was renamed in: no ``last``."""
    import shutil

    shutil.rmtree(two_checkpoints / "last")
    step, ckpt = _load(two_checkpoints, tiny_encoder_factory)
    assert step == 1 and ckpt.folder == two_checkpoints / "previous" and _lines(capsys) == []
