"""Prefect 3 flows that run the DVC stage graph (``flows``) and their scheduled deployments (``serve``)."""
