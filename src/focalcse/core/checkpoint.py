"""Resumable training state: :class:`Checkpointer` writes and verifies the item's last two checkpoints
(weights as safetensors, optimizer / scheduler / RNG state as a weights-only ``state.pt``, a manifest of
sizes and hashes), and falls back past a corrupt one. Used by :func:`focalcse.core.training.train`."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from focalcse.atomic import recover_dir, rotate_dir, sha256_file, staged_dir, tensor_bytes


class Checkpointer:
    """Resumable training state: the last two checkpoints, each a folder written whole, then rotated in.

    ``model.safetensors`` holds the weights (safetensors: no pickled code); ``state.pt`` holds optimizer,
    scheduler, RNG states, step and the result so far, read back with ``torch.load(weights_only=True)``;
    ``manifest.json`` (written last) holds each file's size and sha256. A save builds the new checkpoint
    in a temp folder, moves ``folder`` (``last``) to ``previous`` beside it, then renames the new one to
    ``folder``. A load verifies the newest checkpoint (manifest, sizes, hashes, safetensors header,
    ``state.pt``); a corrupt or incomplete one, or one whose ``state.pt`` holds pickled code that the
    weights-only load refuses, is moved aside to ``<name>.corrupt-<n>`` with one line naming it and the
    reason, and the previous one is tried, else the run starts over. A checkpoint is
    used only if its fingerprint (config, corpus size, total steps) matches the run.

    ``result``: the run's :class:`~focalcse.core.training.TrainResult` so far (saved with ``to_dict()``,
    restored field by field; typed ``Any`` here so that this module does not import the loop).
    """

    FILES = ("model.safetensors", "state.pt")
    MANIFEST = "manifest.json"

    def __init__(self, folder: Path, fingerprint: dict[str, Any]) -> None:
        self.folder = Path(folder)  # the newest checkpoint (after load: the one restored)
        self.last = self.folder
        self.previous = self.folder.parent / "previous"
        self.fingerprint = json.dumps(fingerprint, sort_keys=True)
        self.step = 0

    def save(
        self,
        step: int,
        encoder: nn.Module,
        optimizer,
        scheduler,
        result: Any,
        rng_ranks: list[dict[str, Any]] | None = None,
    ) -> None:
        """Write the checkpoint; ``rng_ranks`` holds every rank's :func:`rng_state` (default: this
        process's only). Optimizer and scheduler states are the same on every DDP rank."""
        from safetensors.torch import save_model

        optimizer_state = optimizer.state_dict()
        with staged_dir(
            self.last,
            swap=lambda tmp, dest: rotate_dir(tmp, dest, self.previous),
            need=tensor_bytes(encoder.state_dict(), optimizer_state),
        ) as tmp:
            save_model(encoder, str(tmp / "model.safetensors"))
            state = {
                "fingerprint": self.fingerprint,
                "step": step,
                "optimizer": optimizer_state,
                "scheduler": scheduler.state_dict(),
                "rng_ranks": rng_ranks or [rng_state()],
                "result": json.dumps(result.to_dict()),
            }
            torch.save(state, tmp / "state.pt")
            files = {
                name: {"size": (tmp / name).stat().st_size, "sha256": sha256_file(tmp / name)}
                for name in self.FILES
            }
            (tmp / self.MANIFEST).write_text(json.dumps({"step": step, "files": files}, indent=2) + "\n")
        self.folder, self.step = self.last, step

    def load(self, encoder: nn.Module, optimizer, scheduler, result: Any, rank: int = 0) -> int:
        """Restore the newest good checkpoint into the given objects and ``rank``'s RNG state; returns
        its step (0 when none is usable). Only rank 0 moves a corrupt checkpoint aside."""
        from safetensors.torch import load_model

        recover_dir(self.previous)  # killed inside a save's rotation
        recover_dir(self.last)  # (a checkpoint written by the former single-folder save)
        for folder in (self.last, self.previous):
            if not folder.is_dir():
                continue
            state, reason = self._verify(folder)
            if state is None:
                if rank == 0:  # every rank reaches the same verdict; one moves it and says so
                    moved = self._move_aside(folder)
                    tqdm.write(f"checkpoint {folder} is unusable ({reason}); moved aside to {moved.name}")
                continue
            if state.get("fingerprint") != self.fingerprint or "rng_ranks" not in state:
                tqdm.write(f"ignoring checkpoint {folder}: written by a run with other settings")
                return 0
            load_model(encoder, str(folder / "model.safetensors"))
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            set_rng_state(state["rng_ranks"][rank])
            saved = json.loads(state["result"])
            for key in ("best_step", "best_dev", "train_seconds", "sentences_seen", "history", "dev_curve"):
                setattr(result, key, saved[key])
            self.folder, self.step = folder, int(state["step"])
            return self.step
        return 0

    def _verify(self, folder: Path) -> tuple[dict[str, Any] | None, str]:
        """``(state, "")`` for a whole checkpoint, ``(None, reason)`` otherwise (a ``state.pt`` holding
        pickled code is refused by the weights-only load, never run: a reason like any other)."""
        import pickle

        from safetensors import safe_open

        manifest_file = folder / self.MANIFEST
        reason = ""
        try:
            manifest = json.loads(manifest_file.read_text())
            for name in self.FILES:
                want, path = manifest["files"][name], folder / name
                if not path.is_file():
                    return None, f"{name} missing"
                if path.stat().st_size != want["size"]:
                    return None, f"{name} is {path.stat().st_size} bytes, manifest says {want['size']}"
                if sha256_file(path) != want["sha256"]:
                    return None, f"{name} sha256 does not match the manifest"
        except FileNotFoundError:
            reason = f"no {self.MANIFEST}"
        except (ValueError, KeyError, TypeError) as err:
            return None, f"unreadable {self.MANIFEST}: {err}"
        try:
            state = torch.load(folder / "state.pt", map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as err:  # weights_only refused pickled code; nothing of it ran
            return None, refused_pickle_reason(err)
        except Exception as err:  # truncated zip, missing file, ...
            return None, reason or f"state.pt does not load: {type(err).__name__}: {err}"
        if reason:
            return None, reason
        try:
            with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
                f.keys()
        except Exception as err:  # SafetensorError: bad header
            return None, f"model.safetensors header does not parse: {err}"
        if not isinstance(state, dict):
            return None, "state.pt is not a checkpoint state"
        return state, ""

    @staticmethod
    def _move_aside(folder: Path) -> Path:
        """Rename ``folder`` to the first free ``<name>.corrupt-<n>`` beside it: out of the way of the
        fallback, kept for inspection while the item runs (it goes with the work folder when the item
        finishes; a failed or killed rerun leaves it there)."""
        n = 1
        while (dest := folder.with_name(f"{folder.name}.corrupt-{n}")).exists():
            n += 1
        os.replace(folder, dest)
        return dest


def refused_pickle_reason(err: Exception) -> str:
    """One line for a ``state.pt`` that ``torch.load(weights_only=True)`` refused, naming what it holds
    instead of PyTorch's advice to load it with ``weights_only=False``."""
    found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
    if found:
        return f"state.pt holds pickled code ({found.group(1)}), refused by the weights-only load"
    unpickler = re.search(r"WeightsUnpickler error: ([^\n]*)", str(err))
    detail = unpickler.group(1) if unpickler else str(err).strip().splitlines()[0]
    return f"state.pt refused by the weights-only load: {detail}"


def rng_state() -> dict[str, Any]:
    """This process's RNG states (CPU, and every CUDA device it sees)."""
    return {
        "cpu": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
