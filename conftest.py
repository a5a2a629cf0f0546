"""Repository-wide pytest rules.

CI sets PAIWEB_FAIL_ON_SKIP=1: then a skipped test fails the run (a test that silently
skips, say because Chromium or a service is missing, proves nothing), unless it is marked
`@pytest.mark.optional`. A module skipped at collection time (`pytest.importorskip`, a
module-level `pytest.skip`) counts too, since its markers cannot be read; skip inside an
optional test instead. xfail is not a skip and is left alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from apps.core.translations import compile_catalogues

FAIL_ON_SKIP = os.environ.get("PAIWEB_FAIL_ON_SKIP", "").strip().lower() in {"1", "true", "yes"}

_optional: set[str] = set()
_skipped: list[tuple[str, str]] = []


# Tests whose outcome can depend on the database or Redis the suite is given: pytest-django's
# database fixtures, a whole demo on a database of its own, or a test marked `redis` (one
# that talks to the suite's Redis itself). `--services-only` keeps just these, so a second
# pass on PostgreSQL and the real Redis does not repeat the pure cores' tests.
_DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "live_server",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--services-only",
        action="store_true",
        help="run only the tests that use the database or the suite's Redis",
    )


def uses_services(item: pytest.Item) -> bool:
    return bool(
        _DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
        or item.get_closest_marker("django_db")
        or item.get_closest_marker("own_database")
        or item.get_closest_marker("redis")
    )


def pytest_configure(config: pytest.Config) -> None:
    # the console's translations, as `make test` compiles them (plain pytest runs too)
    compile_catalogues([Path(__file__).resolve().parent / "locale"])
    config.addinivalue_line(
        "markers",
        "optional: may be skipped even when PAIWEB_FAIL_ON_SKIP=1 (CI) forbids skips",
    )
    config.addinivalue_line(
        "markers", "redis: talks to the suite's Redis itself (kept by --services-only)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--services-only"):
        kept = [item for item in items if uses_services(item)]
        config.hook.pytest_deselected(items=[item for item in items if not uses_services(item)])
        items[:] = kept
    _optional.update(item.nodeid for item in items if item.get_closest_marker("optional"))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _skipped.append((report.nodeid, _reason(report)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and report.nodeid not in _optional:
        _skipped.append((report.nodeid, _reason(report)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if FAIL_ON_SKIP and _skipped and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not (FAIL_ON_SKIP and _skipped):
        return
    terminalreporter.section("skipped tests fail this run (PAIWEB_FAIL_ON_SKIP=1)", red=True)
    for nodeid, reason in _skipped:
        terminalreporter.line(f"SKIPPED {nodeid or '<session>'}: {reason}", red=True)
    terminalreporter.line(
        "Make the test run here (install what it needs in .ci/run or the Makefile), "
        "or mark it @pytest.mark.optional if skipping is acceptable."
    )


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)
