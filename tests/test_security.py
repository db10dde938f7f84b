"""Weights only through safetensors or weights_only loading; no remote code."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def test_no_remote_code_when_loading(monkeypatch, minilm_path: str) -> None:
    import transformers

    from focalcse.core.model import SentenceEncoder

    seen: list[dict] = []
    for cls in (transformers.AutoModel, transformers.AutoTokenizer):
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _orig=original, **kwargs):
            seen.append(kwargs)
            return _orig(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    SentenceEncoder.from_pretrained(minilm_path, pooler="avg")
    assert len(seen) == 2 and all(kw.get("trust_remote_code") is False for kw in seen)


def test_saved_model_and_checkpoint_hold_no_pickled_weights(tmp_path: Path, tiny_encoder_factory) -> None:
    from focalcse.config import TrainConfig
    from focalcse.core.training import train

    corpus = [[101, 2000 + i, 102] for i in range(32)]
    cfg = TrainConfig(batch_size=8, max_steps=4, checkpoint_steps=2, eval_at_start=False)

    def stop(metrics, step):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(
            tiny_encoder_factory(),
            corpus,
            cfg,
            tmp_path / "m",
            log_metrics=stop,
            progress=False,
            work_dir=tmp_path / "w",
        )
    assert (tmp_path / "w" / "last" / "model.safetensors").is_file()
    train(tiny_encoder_factory(), corpus, cfg, tmp_path / "m", progress=False, work_dir=tmp_path / "w")
    files = {p.suffix for p in (tmp_path / "m").rglob("*") if p.is_file()}
    assert ".safetensors" in files and not files & {".bin", ".pt", ".pkl", ".pth"}


class _Evil:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/focalcse-pwned"),))


def test_a_checkpoint_with_pickled_code_is_refused(tmp_path: Path, tiny_encoder_factory, capsys) -> None:
    """Never unpickled: the checkpoint is moved aside, named, and training starts over (a manifest that
    matches such a file: tests/test_checkpoints.py)."""
    from focalcse.core.training import Checkpointer, TrainResult

    marker = Path("/tmp/focalcse-pwned")
    marker.unlink(missing_ok=True)
    (tmp_path / "last").mkdir()
    torch.save({"fingerprint": "{}", "payload": _Evil()}, tmp_path / "last" / "state.pt")
    enc = tiny_encoder_factory()
    opt = torch.optim.AdamW(enc.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    step = Checkpointer(tmp_path / "last", {}).load(enc, opt, sched, TrainResult(0, 0.0, 0, 0.0, 0.0, 0.0))
    assert step == 0 and not marker.exists() and (tmp_path / "last.corrupt-1" / "state.pt").is_file()
    out = capsys.readouterr().out
    assert f"checkpoint {tmp_path / 'last'} is unusable (state.pt holds pickled code" in out
    assert "weights_only=False" not in out
