from __future__ import annotations

import os
import sys
from pathlib import Path

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paiweb.settings")

# Started as `celery -A paiweb …` (worker, beat, flower): a setting the settings refuse ends it
# with the message naming the variable, as manage.py and the web server do, not a traceback.
if Path(sys.argv[0]).name == "celery" or Path(sys.argv[0]).parent.name == "celery":
    from paiweb.env import settings_or_exit

    settings_or_exit()

app = Celery("paiweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
