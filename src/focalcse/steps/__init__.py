"""Pipeline steps: one function per DVC stage, ``run(params, layout, ...)``.

Each reads its inputs where :class:`focalcse.layout.Layout` says, calls the library, and writes its
outputs atomically (:mod:`focalcse.atomic`). ``stages/*.py`` are thin command-line wrappers around
these; everything here is importable and testable without DVC, Prefect or MLflow (tracking arrives
through the ``log_metrics`` callback).
"""
