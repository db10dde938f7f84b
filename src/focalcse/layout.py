"""Where every output lives and what every run is called: the one owner of paths and run names.

``dvc.yaml`` declares the same paths (``tests/test_layout.py`` checks them against this module);
stages, steps, the report, tracking and the work pool all ask a :class:`Layout`. Paths are relative
to the repository root unless the layout is given another ``root``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# The matrix keys of the stages that fan out (dvc.yaml ``matrix``), in the order they name an item.
ABLATION_KINDS = {"tau": "temperature", "m": "m"}  # ablate_<kind>: the train key each kind sweeps


# Keys of a result document kept in companion files beside it (``<stem>.<key>.json``): the per-item
# detail files hold the numbers, ``meta`` (provenance) and ``subsets`` (per-subset scores) sit beside
# them, and DVC's one metrics file is the summary (``Layout.summary_file``).
COMPANION_KEYS = ("meta", "subsets")


def companion_file(path: str | os.PathLike, key: str) -> Path:
    """``metrics/eval/x.json`` -> ``metrics/eval/x.<key>.json`` (``key`` in :data:`COMPANION_KEYS`)."""
    if key not in COMPANION_KEYS:
        raise ValueError(f"companion key {key!r}: expected one of {', '.join(COMPANION_KEYS)}")
    path = Path(path)
    return path.with_name(f"{path.stem}.{key}.json")


def is_companion(path: str | os.PathLike) -> bool:
    return any(Path(path).name.endswith(f".{key}.json") for key in COMPANION_KEYS)


def result_files(folder: str | os.PathLike) -> list[Path]:
    """The result documents in ``folder`` (``*.json`` without their companions), sorted."""
    folder = Path(folder)
    return sorted(p for p in folder.glob("*.json") if not is_companion(p)) if folder.is_dir() else []


def safe_name(backbone: str) -> str:
    """A backbone reference as a path component (``org/name`` -> ``org__name``)."""
    return backbone.replace("/", "__")


# in data/sts: every prepared split with its counts (focalcse.data.sts.write_prepared)
STS_MANIFEST = "manifest.json"
# the split a train item's dev check scores (focalcse.eval.sts_eval.stsb_dev_evaluator): its only STS input
DEV_SPLIT = "STSBenchmark-dev"
ABLATION_TASK = "STSBenchmark"  # the one test split an ablation item (Tables 4, 5) scores
# in each pretrain_generator item's folder: how its MLM was trained, or why none was
GENERATOR_RECORD = "generator.json"


def run_name(backbone: str, loss: str, seed: int, framework: str) -> str:
    """``<framework>-<backbone>-<loss>-seed<k>``: one train / evaluate item in file names and tracking."""
    return f"{framework}-{safe_name(backbone)}-{loss}-seed{seed}"


def stage_name(stage: str, backbone: str, loss: str, seed: int, framework: str) -> str:
    """The DVC name of a ``train`` / ``evaluate`` matrix item: ``train@<framework>-<backbone>-<loss>-<seed>``."""
    return f"{stage}@{framework}-{backbone}-{loss}-{seed}"


@dataclass(frozen=True)
class TrainItem:
    """A ``train`` item's inputs and outputs (the keyword arguments of :func:`focalcse.steps.train`)."""

    corpus_file: Path
    sts_dir: Path
    model_dir: Path
    metrics_file: Path
    curve_file: Path
    dev_file: Path
    prepared_dir: Path | None = None  # the framework's pretrain_generator item

    @property
    def json_outputs(self) -> tuple[Path, Path, Path, Path]:
        """The metrics file, its provenance companion and the curve files (logged as MLflow
        artifacts next to the model)."""
        return (self.metrics_file, companion_file(self.metrics_file, "meta"), self.curve_file, self.dev_file)


@dataclass(frozen=True)
class Layout:
    """Every path of a checkout (``root``: the repository root)."""

    root: Path = Path(".")

    @classmethod
    def at(cls, root: str | os.PathLike) -> Layout:
        return cls(Path(root))

    # ---------------------------------------------------------------- data
    @property
    def check_file(self) -> Path:
        """Written by the ``check`` stage, which every other stage depends on; its content never
        changes, so a passing check reruns nothing downstream."""
        return self.root / "data" / "checked.json"

    @property
    def corpus_sources_file(self) -> Path:
        """The check stage's fingerprint of the corpus it read (content, not path); the ``sample``
        stage depends on it, so another corpus behind the same mirror setting reruns the sample."""
        return self.root / "data" / "sources" / "corpus.json"

    @property
    def sts_sources_file(self) -> Path:
        """The check stage's fingerprint of the SentEval files it read; ``prepare_sts`` depends on it."""
        return self.root / "data" / "sources" / "sts.json"

    @property
    def corpus_file(self) -> Path:
        return self.root / "data" / "corpus" / "train.txt"

    @property
    def sts_dir(self) -> Path:
        return self.root / "data" / "sts"

    @property
    def sts_manifest(self) -> Path:
        return self.sts_dir / STS_MANIFEST

    def sts_split(self, key: str) -> Path:
        """One prepared split's file (``key`` e.g. ``STS12`` or :data:`DEV_SPLIT`)."""
        return self.sts_dir / f"{key}.tsv"

    # ---------------------------------------------------------------- models
    @property
    def models_dir(self) -> Path:
        return self.root / "models"

    def model_dir(self, backbone: str, loss: str, seed: int, framework: str) -> Path:
        """``models/<framework>/<backbone>/<loss>/seed<k>``."""
        return self.models_dir / framework / safe_name(backbone) / loss / f"seed{seed}"

    @property
    def generators_dir(self) -> Path:
        return self.models_dir / "generators"

    def generator_dir(self, framework: str, backbone: str) -> Path:
        """The ``pretrain_generator`` item of ``framework`` and ``backbone``: the MLM generator trained
        here for a framework that needs one, or a record saying why none is (another framework; a
        configured hub id / folder)."""
        return self.generators_dir / framework / safe_name(backbone)

    def generator_meta_file(self, framework: str, backbone: str) -> Path:
        """The ``pretrain_generator`` item's provenance and timings, kept outside its folder (which
        the train items depend on) so that a rerun with the same inputs leaves that folder byte-identical."""
        return self.metrics_dir / "generators" / f"{framework}-{safe_name(backbone)}.meta.json"

    # ---------------------------------------------------------------- metrics
    @property
    def metrics_dir(self) -> Path:
        return self.root / "metrics"

    @property
    def train_metrics_dir(self) -> Path:
        return self.metrics_dir / "train"

    @property
    def eval_dir(self) -> Path:
        return self.metrics_dir / "eval"

    @property
    def curves_dir(self) -> Path:
        return self.metrics_dir / "curves"

    @property
    def ablation_dir(self) -> Path:
        return self.metrics_dir / "ablation"

    @property
    def significance_file(self) -> Path:
        return self.metrics_dir / "significance.json"

    @property
    def summary_file(self) -> Path:
        """DVC's one metrics file: per backbone and loss the numbers a user compares (``dvc metrics
        show``, ``dvc exp show``); the per-item files are plain outputs."""
        return self.metrics_dir / "summary.json"

    @property
    def hard_negatives_dir(self) -> Path:
        return self.metrics_dir / "hard_negatives"

    def hard_negatives_file(self, backbone: str, loss: str) -> Path:
        """One ``hard_negatives`` item: the starting model and ``loss``'s first-seed model."""
        return self.hard_negatives_dir / f"{safe_name(backbone)}-{loss}.json"

    def train_metrics(self, backbone: str, loss: str, seed: int, framework: str) -> Path:
        return self.train_metrics_dir / f"{run_name(backbone, loss, seed, framework)}.json"

    def loss_curve(self, backbone: str, loss: str, seed: int, framework: str) -> Path:
        return self.curves_dir / "loss" / f"{run_name(backbone, loss, seed, framework)}.json"

    def dev_curve(self, backbone: str, loss: str, seed: int, framework: str) -> Path:
        return self.curves_dir / "dev" / f"{run_name(backbone, loss, seed, framework)}.json"

    def eval_metrics(self, backbone: str, loss: str, seed: int, framework: str) -> Path:
        return self.eval_dir / f"{run_name(backbone, loss, seed, framework)}.json"

    def ablation_metrics(self, kind: str, value: str) -> Path:
        """``value`` as ``dvc.yaml`` renders the swept number (``0.1``, ``0.05``): it names the file."""
        if kind not in ABLATION_KINDS:
            raise ValueError(f"ablation kind {kind!r}: expected one of {', '.join(ABLATION_KINDS)}")
        return self.ablation_dir / f"{kind}-{value}.json"

    def train_item(self, backbone: str, loss: str, seed: int, framework: str) -> TrainItem:
        return TrainItem(
            corpus_file=self.corpus_file,
            sts_dir=self.sts_dir,
            model_dir=self.model_dir(backbone, loss, seed, framework),
            metrics_file=self.train_metrics(backbone, loss, seed, framework),
            curve_file=self.loss_curve(backbone, loss, seed, framework),
            dev_file=self.dev_curve(backbone, loss, seed, framework),
            prepared_dir=self.generator_dir(framework, backbone),
        )

    # ---------------------------------------------------------------- every stage's outputs
    def stage_outputs(
        self,
        stage: str,
        backbone: str = "",
        loss: str = "",
        seed: int = 0,
        framework: str = "",
        value: str = "",
    ) -> set[Path]:
        """What one item of ``stage`` writes, companions included: the one table of outputs.

        ``dvc.yaml``'s ``outs`` / ``metrics`` / ``plots`` are checked against it both ways
        (``tests/test_layout.py``), the check stage's expected outputs are built from it
        (:func:`focalcse.steps.check.expected_outputs`), so a new output is one entry here plus its
        line in ``dvc.yaml``. ``value``: an ablation item's swept number as ``dvc.yaml`` renders it."""

        def with_companions(path: Path, *keys: str) -> set[Path]:
            return {path, *(companion_file(path, k) for k in keys)}

        item = (backbone, loss, seed, framework)
        table = {
            "check": lambda: {self.check_file, self.corpus_sources_file, self.sts_sources_file},
            "sample": lambda: {self.corpus_file},
            "prepare_sts": lambda: {self.sts_dir},
            "train": lambda: (
                {self.model_dir(*item), self.loss_curve(*item), self.dev_curve(*item)}
                | with_companions(self.train_metrics(*item), "meta")
            ),
            "evaluate": lambda: with_companions(self.eval_metrics(*item), "meta", "subsets"),
            "pretrain_generator": lambda: {
                self.generator_dir(framework, backbone),
                self.generator_meta_file(framework, backbone),
            },
            "significance": lambda: (
                with_companions(self.significance_file, "meta") | with_companions(self.summary_file, "meta")
            ),
            **{
                f"ablate_{kind}": (
                    lambda kind=kind: with_companions(self.ablation_metrics(kind, value), "meta")
                )
                for kind in ABLATION_KINDS
            },
            "hard_negatives": lambda: with_companions(self.hard_negatives_file(backbone, loss), "meta"),
            "report": lambda: {self.reports_dir},
        }
        if stage not in table:
            raise ValueError(f"stage {stage!r}: expected one of {', '.join(table)}")
        return table[stage]()

    # ---------------------------------------------------------------- report
    @property
    def reports_dir(self) -> Path:
        return self.root / "reports"

    @property
    def figures_dir(self) -> Path:
        return self.reports_dir / "figures"

    # ---------------------------------------------------------------- reproduction
    @property
    def reproduction_tolerance_file(self) -> Path:
        """How far a rerun may differ from the committed results (``focalcse reproduced``): the
        ``--json`` record of a comparison between two runs of the default (code, precision and CPU
        of each side in it); written by hand, by no stage."""
        return self.root / "docs" / "reproduction-tolerance.json"

    # ---------------------------------------------------------------- tracking
    @property
    def mlflow_db(self) -> Path:
        return self.root / "mlflow.db"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.root / "mlartifacts"
