# One image for every role (web, worker, beat, flower, init); docker-compose.yml picks the
# command; its proxy is the stock nginx image with deploy/nginx/paiweb.conf.template.
# The project is installed in editable mode so that BASE_DIR stays /app, where
# templates/, static/ and examples/ live.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=paiweb.settings \
    PAIWEB_VAR_DIR=/app/var

# The node agent isolates pods with bubblewrap, iproute2 (a network namespace per job),
# util-linux (setpriv, nsenter, prlimit) and nftables (jobs across hosts); it runs as root
# in a privileged container (docker-compose.yml) and refuses to run pods where it cannot
# isolate them (SANDBOX=strict).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap iproute2 util-linux nftables \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 1000 paiweb \
    && useradd --system --uid 1000 --gid paiweb --home-dir /app --shell /usr/sbin/nologin paiweb

WORKDIR /app

# Dependencies first, in a layer of their own that survives code changes: install against
# empty packages, then copy the code over them.
COPY pyproject.toml ./
RUN mkdir -p paiweb apps \
    && touch paiweb/__init__.py apps/__init__.py \
    && pip install -e .

COPY --chown=paiweb:paiweb . .
RUN pip install --no-deps -e . \
    && python -m apps.core.translations \
    && DEBUG=false SECRET_KEY=collectstatic-only-never-used-when-the-image-runs python manage.py collectstatic --noinput -v 0 \
    && mkdir -p /app/var /app/certs \
    && chown -R paiweb:paiweb /app/var /app/staticfiles /app/certs

USER paiweb
EXPOSE 8000 5555

CMD ["gunicorn", "paiweb.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "2", \
     "--threads", "4", "--access-logfile", "-", "--no-control-socket"]
