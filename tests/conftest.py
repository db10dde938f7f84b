"""Shared fixtures: offline settings, the STS data mirror, the MiniLM tokenizer and a tiny random BERT.

The STS data is found through ``FOCALCSE_DATA_MIRROR`` (a folder laid out like ``shared/data``), by
default the ``shared/data`` folder beside the repository checkout; tests that need it are skipped with
a message when it is absent.
"""

from __future__ import annotations

import os

# Before anything imports transformers / datasets / huggingface_hub: never touch the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# The tests' bf16 runs are tiny: the check stage's refusal of bf16 on a CPU without bf16 matmul
# instructions (steps.check.check_precision) is for real runs; its own tests unset this.
os.environ["FOCALCSE_ALLOW_SLOW_BF16"] = "1"

import random  # noqa: E402
import shutil  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

# The test models are tiny: one thread is fastest, and with two, OpenMP's barriers make every small
# op 100x slower whenever another process is busy on the (2-core) machine. FOCALCSE_TEST_THREADS overrides.
torch.set_num_threads(int(os.environ.get("FOCALCSE_TEST_THREADS", "1")))

DEFAULT_MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
MIRROR_ENV = "FOCALCSE_DATA_MIRROR"
TINY_SEED = 1234


def mirror_root() -> Path:
    return Path(os.environ.get(MIRROR_ENV) or DEFAULT_MIRROR).expanduser()


@pytest.fixture(scope="session")
def data_mirror() -> Path:
    """The data mirror folder (``shared/data`` layout); skips when it is missing."""
    root = mirror_root()
    if not (root / "senteval" / "downstream").is_dir():
        pytest.skip(
            f"STS data mirror not found at {root} (no senteval/downstream); "
            f"set {MIRROR_ENV} to a folder laid out like shared/data"
        )
    return root


@pytest.fixture(scope="session")
def senteval_dir(data_mirror: Path) -> Path:
    """The mirror's SentEval ``downstream`` folder."""
    return data_mirror / "senteval" / "downstream"


@pytest.fixture(scope="session")
def minilm_path() -> str:
    from focalcse.core.model import resolve_backbone

    try:
        return resolve_backbone("all-MiniLM-L6-v2")
    except ValueError as err:  # pragma: no cover - declared dependency
        pytest.skip(f"all-MiniLM-L6-v2 not installed: {err}")


@pytest.fixture(scope="session")
def minilm_tokenizer(minilm_path: str):
    """The bert-base-uncased-vocabulary tokenizer shipped with all-MiniLM-L6-v2."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path)


@pytest.fixture
def tiny_bert(minilm_tokenizer) -> torch.nn.Module:
    """A bare tiny random BERT (HF ``AutoModel``, 2 layers, hidden 32, the MiniLM vocabulary) in eval
    mode, seed 0, initialised with std 0.5 (well-separated vectors, see
    ``focalcse.testing.project.save_tiny_backbone``)."""
    from transformers import AutoModel

    from focalcse.core.model import tiny_config

    torch.manual_seed(0)
    config = tiny_config(minilm_tokenizer.vocab_size)
    config.initializer_range = 0.5
    return AutoModel.from_config(config).eval()


@pytest.fixture
def tiny_encoder_factory(minilm_tokenizer) -> Callable[..., torch.nn.Module]:
    """``make(pooler='cls', mlp_only_train=False, seed=TINY_SEED)``: a tiny random BERT encoder
    (hidden 32, 2 layers, 2 heads) with the MiniLM tokenizer; the same seed gives the same weights."""
    from focalcse.core.model import SentenceEncoder, tiny_config

    def make(pooler: str = "cls", mlp_only_train: bool = False, seed: int = TINY_SEED, max_seq_len: int = 32):
        torch.manual_seed(seed)
        return SentenceEncoder.from_config(
            tiny_config(minilm_tokenizer.vocab_size),
            minilm_tokenizer,
            pooler=pooler,
            mlp_only_train=mlp_only_train,
            max_seq_len=max_seq_len,
        )

    return make


# ---------------------------------------------------------------- a miniature SentEval folder
WORDS = [
    "a",
    "man",
    "woman",
    "dog",
    "cat",
    "child",
    "is",
    "are",
    "was",
    "playing",
    "eating",
    "running",
    "riding",
    "sitting",
    "on",
    "in",
    "the",
    "with",
    "guitar",
    "piano",
    "horse",
    "bike",
    "park",
    "street",
    "kitchen",
    "table",
    "red",
    "blue",
    "small",
    "big",
    "quickly",
    "slowly",
    "near",
    "two",
    "three",
]


def random_sentence(rng: random.Random, lo: int = 3, hi: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def tiny_pairs(rng: random.Random, n: int, lo: float = 0.0, hi: float = 5.0) -> list[tuple[str, str, float]]:
    """``n`` random sentence pairs with distinct gold scores spread over [lo, hi]."""
    scores = [lo + (hi - lo) * (i + 0.5) / n for i in range(n)]
    rng.shuffle(scores)
    return [(random_sentence(rng), random_sentence(rng), round(s, 4)) for s in scores]


def write_tiny_senteval(root: Path, pairs_per_subset: int = 8, seed: int = 0) -> Path:
    """A SentEval ``downstream`` folder with the real file names and subset names but only a few pairs
    (read it with ``check_counts=False``). Each STS12-16 subset also gets one unscored pair."""
    from focalcse.data.tasks import TASKS

    rng = random.Random(seed)
    for task, subsets in ((t.name, t.subsets) for t in TASKS.values() if t.pooled):
        folder = root / "STS" / f"{task}-en-test"
        folder.mkdir(parents=True)
        for subset in subsets:
            pairs = tiny_pairs(rng, pairs_per_subset)
            inp = [f"{a}\t{b}" for a, b, _ in pairs] + [f"{random_sentence(rng)}\t{random_sentence(rng)}"]
            gs = [f"{y}" for _, _, y in pairs] + [""]
            (folder / f"STS.input.{subset}.txt").write_text("\n".join(inp) + "\n", encoding="utf-8")
            (folder / f"STS.gs.{subset}.txt").write_text("\n".join(gs) + "\n", encoding="utf-8")
    stsb = root / "STS" / "STSBenchmark"
    stsb.mkdir(parents=True)
    for split, n in (("train", 12), ("dev", 12), ("test", 24)):
        rows = [
            f"main-captions\tMSRvid\t2012test\t{i:04d}\t{y}\t{a}\t{b}"
            for i, (a, b, y) in enumerate(tiny_pairs(rng, n))
        ]
        (stsb / f"sts-{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    sick = root / "SICK"
    sick.mkdir(parents=True)
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
    for name, n in (("SICK_train.txt", 12), ("SICK_trial.txt", 12), ("SICK_test_annotated.txt", 16)):
        rows = [header] + [
            f"{i}\t{a}\t{b}\t{y}\tNEUTRAL" for i, (a, b, y) in enumerate(tiny_pairs(rng, n, 1.0, 5.0), 1)
        ]
        (sick / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def tiny_sts_dir(tmp_path: Path) -> Path:
    """A miniature SentEval ``downstream`` folder (real layout and subset names, few pairs)."""
    return write_tiny_senteval(tmp_path / "downstream")


# ---------------------------------------------------------------- one tiny `dvc repro`, shared
def _built_once(tmp_path_factory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(folder)`` once per test run: under pytest-xdist the workers share one build (the first
    to ask builds it under a file lock, the others wait for it), so the tiny ``dvc repro`` that most
    end-to-end tests start from runs once, not once per worker. A failed build leaves no marker, so
    the next worker to ask builds it again (and fails with its own error)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return build(tmp_path_factory.mktemp(name))
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # the run's folder, above every worker's own
    done, folder = shared / f"{name}.built", shared / name
    with FileLock(str(shared / f"{name}.lock")):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed half-way
            folder.mkdir()
            done.write_text(str(build(folder)))
    return Path(done.read_text())


@pytest.fixture(scope="session")
def tiny_backbone(tmp_path_factory) -> Path:
    """A random 2-layer BERT (MiniLM tokenizer) saved as an HF folder."""
    from focalcse.testing.project import save_tiny_backbone

    return _built_once(tmp_path_factory, "backbone", lambda d: save_tiny_backbone(d / "tiny"))


@pytest.fixture(scope="session")
def tiny_repro(tmp_path_factory, data_mirror, tiny_backbone) -> Path:
    """A copy of the repo with the tiny config after one full ``dvc repro``. Shared by the end-to-end
    tests (and by the pytest-xdist workers): treat it as read-only (copy it with ``shutil.copytree``
    before changing anything). Built with tracking off: none of its users reads an MLflow record
    (the tracking, flow, probe and pool tests track their own runs), and tracking on and off give the
    same outputs (tests/test_tracking_outputs.py)."""
    from focalcse.testing.project import NO_TRACKING, make_tiny_project, project_env, run

    def build(folder: Path) -> Path:
        dest = make_tiny_project(folder / "repo", data_mirror, tiny_backbone)
        run(["dvc", "repro"], dest, project_env(dest, **NO_TRACKING), timeout=1500)
        return dest

    return _built_once(tmp_path_factory, "proj", build)


# ---------------------------------------------------------------- the order the workers take tests in
def _lanes(items: list[pytest.Item]) -> tuple[list, list, list]:
    """The test modules in collection order, in three lanes: those that use the shared tiny
    ``dvc repro`` (``tiny_repro``), the other modules with a slow test, and the rest."""
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    shared, slow, rest = [], [], []
    for group in modules.values():
        if any("tiny_repro" in item.fixturenames for item in group):
            shared.append(group)
        elif any(item.get_closest_marker("slow") for item in group):
            slow.append(group)
        else:
            rest.append(group)
    return shared, slow, rest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the collection for `make test` (pytest-xdist, two workers, ``--dist worksteal``), which
    hands each worker one contiguous half of the collection and then moves tests from the tail of a
    busy worker's queue to an idle one. The first half starts with the modules that share the tiny
    ``dvc repro`` (the first of them builds it, ~3 min), the second half with the other slow modules,
    so neither worker sits waiting for that build, and the fast modules fill both tails, where the
    stealing evens them out. Modules stay whole (their module-scoped fixtures are set up once).
    The order changes no result: every test is independent of the others' order."""
    shared, slow, rest = _lanes(items)
    flat = [item for group in rest for item in group]
    first = sum(len(group) for group in shared)
    cut = len(items) // 2 - first  # fast tests that complete the first half
    if not shared or not slow or not 0 <= cut <= len(flat):
        return
    items[:] = [
        *(item for group in shared for item in group),
        *flat[:cut],
        *(item for group in slow for item in group),
        *flat[cut:],
    ]
