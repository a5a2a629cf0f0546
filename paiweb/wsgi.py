from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paiweb.settings")

from paiweb.env import settings_or_exit  # noqa: E402

# 3: gunicorn's "worker failed to boot", on which it stops instead of booting workers forever.
settings_or_exit(status=3)

from apps.core.wsgi import application as _application  # noqa: E402

application = _application()
