"""Shared fixtures. Add yours; don't replace others'."""

from __future__ import annotations

import signal

import pytest

# ---------------------------------------------------------------- server (issue 6)
# One real `ocrforge serve` process for tests/test_server*.py; small limits so every
# limit can be hit cheaply: queue 4 requests, 4-page batches, 1 MiB uploads, 4 Mpx, 3 PDF pages.
SERVER_ARGS = ("--queue-size", "4", "--max-batch-pages", "4", "--max-wait-ms", "50",
               "--max-upload-mb", "1", "--max-pixels", "4000000", "--max-pdf-pages", "3",
               "--det-limit", "640", "--timeout", "60")


@pytest.fixture(scope="session")
def ocr_server(tmp_path_factory):
    from serverkit import ServerProcess

    srv = ServerProcess(*SERVER_ARGS, log_dir=tmp_path_factory.mktemp("server"))
    try:
        srv.wait_ready()
        yield srv
    finally:
        code = srv.stop()
        # uvicorn exits by re-raising SIGTERM after a clean shutdown
        assert code in (0, -signal.SIGTERM), f"server did not shut down cleanly ({code}):\n{srv.log()}"
