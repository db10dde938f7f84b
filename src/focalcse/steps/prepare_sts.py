"""Step ``prepare_sts``: every registered task's evaluation split plus the extra splits, read from
SentEval's layout (counts checked) and written as normalised TSVs with a manifest."""

from __future__ import annotations

from typing import Any

from focalcse.atomic import staged_dir
from focalcse.config import Params
from focalcse.data.sources import SENTEVAL_URL, mirror_dir, senteval_dir
from focalcse.data.sts import write_prepared
from focalcse.data.tasks import prepared_keys, read_split
from focalcse.layout import Layout


def run(params: Params, layout: Layout) -> dict[str, Any]:
    """Read every evaluated task (``eval.tasks``) and extra split; ``layout.sts_dir`` appears only when
    all of them are valid. A registered task that no ``eval.tasks`` lists is not asked for."""
    root = senteval_dir(params.data.mirror or None)
    splits = [(key, read_split(root, key)) for key in prepared_keys(params.eval.tasks)]
    # Where the data came from, without this machine's paths: moving the mirror must not change the
    # output's hash (the files' content identifies the data).
    where = "a data mirror's senteval/downstream" if mirror_dir(params.data.mirror or None) else SENTEVAL_URL
    with staged_dir(layout.sts_dir) as tmp:
        manifest = write_prepared(splits, tmp, source=where)
    return manifest
