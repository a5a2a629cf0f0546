"""`manage.py compile_translations`: compile the console's catalogues (locale/*.po → .mo)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from apps.core.translations import compile_catalogues


class Command(BaseCommand):
    help = "Compile the console's translations (locale/<lang>/LC_MESSAGES/django.po to .mo)."

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="compile even up-to-date ones")

    def handle(self, *args, force: bool = False, **options):
        written = compile_catalogues([Path(p) for p in settings.LOCALE_PATHS], force=force)
        for path in written:
            self.stdout.write(f"compiled {path}")
        if not written:
            self.stdout.write("translations are up to date")
