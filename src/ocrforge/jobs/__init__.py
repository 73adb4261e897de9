"""Resumable batch jobs: one JSON and one text file per page, a manifest, skip what is done.

>>> from ocrforge.jobs import run_job
>>> summary = run_job(["scans/"], "out/", config=EngineConfig(model_set="ppocrv6-tiny"))

The Ray backend (``ocrforge.ray.read_dataset``) writes the same output folder.
"""

from ocrforge.jobs.local import format_summary, run_job
from ocrforge.jobs.recorder import JobSummary
from ocrforge.jobs.store import JobLockedError

__all__ = ["JobLockedError", "JobSummary", "format_summary", "run_job"]
