"""Django's makemessages, also finding the messages the cores write with `say` and `say_n`
(apps/core/words.py): their templates are the catalogue's msgids."""

from __future__ import annotations

from django.core.management.commands import makemessages


class Command(makemessages.Command):
    xgettext_options = [
        *makemessages.Command.xgettext_options,
        "--keyword=say",
        "--keyword=say_n:2,3",
    ]
