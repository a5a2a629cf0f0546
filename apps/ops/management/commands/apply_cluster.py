"""`manage.py apply_cluster FILE.toml`: create or update what a cluster file declares."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from apps.cluster.clusterfile import cluster_file_check
from apps.cluster.selectors import cluster_state
from apps.jobs.selectors import busy_node_names
from apps.ops.services import KINDS, OUTCOMES, ApplyReport, cluster_apply


class Command(BaseCommand):
    help = (
        "Apply a cluster file (TOML): instance types, pools and nodes, the quota tree, "
        "workspaces, users, access keys, images and the spot market's parameters. The whole "
        "file is checked first and applied in one transaction, or not at all. Re-applying is "
        "safe; nothing absent from the file is deleted. See examples/demo-cluster.toml for the "
        "format."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="path to the cluster file")
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="check the file and report what would change, without writing anything",
        )

    def handle(self, *args, file: str, dry_run: bool, verbosity: int, **options) -> None:
        data = _load(file)
        with transaction.atomic():
            # Checked against the database inside the transaction that writes, so what was
            # checked is what gets applied.
            declaration, errors = cluster_file_check(
                data, existing=cluster_state(busy=busy_node_names()), environ=os.environ
            )
            if errors:
                listing = "\n".join(f"  {e}" for e in errors)
                raise CommandError(
                    f"{file}: {len(errors)} problem{'s' if len(errors) != 1 else ''}, "
                    f"nothing applied:\n{listing}",
                    returncode=1,
                )
            report = cluster_apply(declaration=declaration)
            if dry_run:
                transaction.set_rollback(True)
        self._print(file, report, dry_run=dry_run, verbosity=verbosity)

    def _print(self, file: str, report: ApplyReport, *, dry_run: bool, verbosity: int) -> None:
        verb = "Checked (dry run, nothing written)" if dry_run else "Applied"
        self.stdout.write(f"{verb} {file}:")
        width = max(map(len, KINDS)) + 2
        for kind in KINDS:
            counts = report.counts[kind]
            if any(counts.values()):
                self.stdout.write(
                    f"  {kind:<{width}}"
                    + "  ".join(f"{outcome} {counts[outcome]:>3}" for outcome in OUTCOMES)
                )
        self.stdout.write(
            f"  {'total':<{width}}"
            + "  ".join(f"{outcome} {report.total(outcome):>3}" for outcome in OUTCOMES)
        )
        if verbosity >= 2:
            for change in report.changes:
                self.stdout.write(f"    {change}")
        if not report.changed:
            self.stdout.write(self.style.SUCCESS("Nothing to change: the cluster matches the file"))
        elif not dry_run:
            self.stdout.write(
                self.style.SUCCESS(
                    f"{report.total('created')} created, {report.total('updated')} updated."
                )
            )


def _load(file: str) -> dict:
    try:
        return tomllib.loads(Path(file).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CommandError(f"{file}: no such file", returncode=2) from None
    except tomllib.TOMLDecodeError as exc:
        raise CommandError(f"{file}: not valid TOML: {exc}", returncode=1) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"{file}: cannot read: {exc}", returncode=2) from None
