"""pytest plugin of the device suite: a time limit per test, and a record of each test as it ends.

Loaded with ``-p _pytest_deadline`` (this folder on ``PYTHONPATH``), by ``device_tests.py``:

- ``--test-timeout SECONDS``: a test still running after that long ends the whole process, after
  the tracebacks of every thread are written to the process's stderr (``faulthandler``). A hung
  device call (a capture that never ends, a synchronize that waits forever) cannot be interrupted
  from Python, so the process is the unit that ends; the records below keep what it had done.
- ``--test-record FILE``: one JSON line per test start and per test phase outcome, written and
  flushed as they happen, so that a process ended by the time limit or by an abort (a failed
  C++ assertion, a segfault) still tells which tests passed and which one was running.
"""

from __future__ import annotations

import faulthandler
import json
import os
import time
from typing import IO, Any

import pytest

# The real stderr, taken before pytest captures file descriptor 2 for each test: the tracebacks of
# a timed-out test must reach the process's stderr, not a capture buffer that is never shown.
_STDERR: IO[str] = os.fdopen(os.dup(2), "w")
# The session's config, for the report hooks (reports do not carry it).
_CONFIG: dict[str, pytest.Config] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("device suite")
    group.addoption(
        "--test-timeout",
        type=float,
        default=0.0,
        help="end the process (tracebacks on stderr) when one test runs longer (0: no limit)",
    )
    group.addoption("--test-record", default=None, help="file: one JSON line per test event")


def _record(config: pytest.Config, **event: Any) -> None:
    path = config.getoption("test_record")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(event, default=str) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    timeout = float(item.config.getoption("test_timeout"))
    _record(item.config, event="start", nodeid=item.nodeid, time=time.time())
    if timeout > 0:
        faulthandler.dump_traceback_later(timeout, exit=True, file=_STDERR)
    try:
        yield
    finally:
        if timeout > 0:
            faulthandler.cancel_dump_traceback_later()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _CONFIG.get("config")
    if config is None:
        return
    message = None
    if report.failed or (report.skipped and report.when != "call"):
        message = str(report.longrepr)[-4000:]
    _record(
        config,
        event="report",
        nodeid=report.nodeid,
        when=report.when,
        outcome=report.outcome,
        duration=round(report.duration, 3),
        message=message,
    )


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG["config"] = config


def pytest_unconfigure(config: pytest.Config) -> None:
    _STDERR.close()  # no test runs any more: nothing can time out


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed and "config" in _CONFIG:
        _record(
            _CONFIG["config"],
            event="collect-error",
            nodeid=report.nodeid,
            message=str(report.longrepr)[-4000:],
        )
