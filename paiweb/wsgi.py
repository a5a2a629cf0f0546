from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paiweb.settings")

from apps.core.wsgi import application as _application  # noqa: E402

application = _application()
