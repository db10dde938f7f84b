"""What the documents and the reproduction check read from the committed results, outside the pipeline.

* :mod:`~focalcse.evidence.docs_blocks`: the numbers of README.md and docs/*.md, rendered by
  ``make docs`` (cog) from the committed result sets;
* :mod:`~focalcse.evidence.bench_blocks`: the same for the benchmark files in ``benchmarks/``
  (docs/performance.md);
* :mod:`~focalcse.evidence.reproduced`: ``focalcse reproduced``, the report's tables of a rerun against
  the committed ones (git HEAD), with the tolerance measured across CPU kinds.

No stage imports this package, so editing how a document words a number changes no stage's code
dependencies (the report stage depends on ``src/focalcse/report/`` whole, for ``published.yaml``).
"""
