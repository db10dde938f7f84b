"""Operations: MLflow tracking, DVC orchestration helpers and the Prefect work pool."""
