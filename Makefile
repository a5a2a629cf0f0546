# paiweb: the two commands are `make demo` and `make test`. `make help` lists the rest.
#
# Everything runs from one virtualenv (.venv), made with the Python that pyenv selects for
# this directory (.python-version), else python3; Python 3.12 or newer is required.
# DATABASE_URL and REDIS_URL, when set, switch from SQLite and the embedded Redis to
# PostgreSQL and a real Redis, for the demo and the tests alike.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-print-directory

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check --no-input
PIP_INSTALL := $(PIP) install --quiet --progress-bar off
CLUSTER_FILE ?= examples/demo-cluster.toml
CHROMIUM ?= /usr/bin/chromium
PYTEST_ARGS ?=
# The SDK versions the seed pins; the API tests also run against them (make test-api-pinned).
PINNED_VENV ?= .venv-sdk-pinned
PINNED_SDKS ?= alibabacloud_pai_dlc20201203==1.4.17 alibabacloud_aiworkspace20210204==3.0.1

.PHONY: help demo test install install-test venv migrate cluster chromium bubblewrap nginx lint \
        translations messages gettext \
        test-api-pinned clean

help:
	@echo "make demo             set up .venv and the database, then run the whole console"
	@echo "                      (web :8000, Flower :5555, worker, node agent, beat, embedded Redis)"
	@echo "                      with DEBUG on unless DEBUG is set"
	@echo "make test             install the test extras and run the whole test suite"
	@echo "make test-api-pinned  run tests/api with the SDK versions the seed pins"
	@echo "make lint             ruff (rules and format), mypy on the pure cores and services"
	@echo "make messages         new console text into locale/*/django.po, to be translated"
	@echo "make clean            remove the virtualenvs and collected static files"
	@echo "Environment: DATABASE_URL, REDIS_URL, PORT, FLOWER_PORT, CLUSTER_FILE, PYTHON,"
	@echo "PYTEST_ARGS (e.g. PYTEST_ARGS='tests/unit -x'). See .env.example and docs/operations.md."

# --- the virtualenv ---------------------------------------------------------------------
# Candidates in order: $(PYTHON) if given, pyenv's choice for this directory, python3, then
# python3.13, python3.12, the system's python3 and any pyenv-installed 3.12+ in case python3
# is older (or a pyenv shim for a version that is not installed). The first >= 3.12 wins.
define make_venv
chosen=""; tried=""
if [ -n "$(PYTHON)" ]; then candidates="$(PYTHON)"; else
  candidates="$$(pyenv which python3 2>/dev/null || true) python3 python3.13 python3.12 /usr/local/bin/python3 /usr/bin/python3"
  candidates="$$candidates $$(ls -d "$$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3.1[2-9]*/bin/python3 2>/dev/null || true)"; fi
for candidate in $$candidates; do
  command -v "$$candidate" >/dev/null 2>&1 || { tried="$$tried $$candidate (not found)"; continue; }
  version="$$("$$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || continue
  if "$$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then chosen="$$candidate"; break; fi
  tried="$$tried $$candidate ($$version)"
done
if [ -z "$$chosen" ]; then
  echo "paiweb needs Python 3.12 or newer; tried:$$tried." >&2
  echo "Install Python 3.12 (e.g. 'pyenv install 3.12'), or run: make PYTHON=/path/to/python3.12 ..." >&2
  exit 1
fi
echo "Creating $(VENV) with $$chosen (Python $$version)"
"$$chosen" -m venv --clear $(VENV)
endef
export make_venv

$(PY):
	@eval "$$make_venv"

venv: $(PY)
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))' || { \
	  echo "$(VENV) runs Python $$($(PY) -V 2>&1); paiweb needs 3.12+. Remove it: rm -rf $(VENV)" >&2; \
	  exit 1; }

# Stamps: re-install only when pyproject.toml changes (the install is editable).
$(VENV)/.installed: pyproject.toml | venv
	@echo "Installing paiweb into $(VENV)"
	@$(PIP_INSTALL) -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml | venv
	@echo "Installing paiweb with the test extras into $(VENV)"
	@$(PIP_INSTALL) -e '.[test]'
	@touch $@ $(VENV)/.installed

install: venv $(VENV)/.installed
install-test: venv $(VENV)/.installed-test

# --- the demo ---------------------------------------------------------------------------
# DEBUG is off unless asked for (paiweb/settings.py). Unless DEBUG is set, `manage.py demo`
# turns it on itself (so it runs with the installation's generated SECRET_KEY; its banner says
# so), and the demo's migrate and apply_cluster run with it too.
migrate cluster: export DEBUG := $(or $(DEBUG),true)

# The console's translations (locale/<lang>/LC_MESSAGES/django.po) compiled to the .mo files
# Django reads, with polib: no GNU gettext needed. Only stale ones are compiled.
translations: install
	@$(PY) -m apps.core.translations

# New console text into the catalogues (untranslated until someone translates it): needs
# GNU gettext, as does the test that no text is missing from them.
messages: install gettext
	@DEBUG=true $(PY) -m apps.core.translations --extract

gettext:
	@if ! command -v xgettext >/dev/null || ! command -v msgmerge >/dev/null; then \
	  echo "Installing GNU gettext for the catalogue check (apt-get install gettext)"; \
	  apt-get install -y -qq gettext >/dev/null 2>&1 || \
	    { apt-get update -qq && apt-get install -y -qq gettext >/dev/null; } || \
	    { echo "The catalogue check needs GNU gettext: apt-get install gettext" >&2; exit 1; }; \
	fi

migrate: install translations
	@$(PY) manage.py migrate --noinput

cluster: migrate
	@$(PY) manage.py apply_cluster $(CLUSTER_FILE)

# Static files need no collecting: whitenoise serves them through the finders.
# As root, the sandbox's tools are installed so pods are isolated; without them (or root)
# the demo still runs pods, and says loudly that they are not isolated.
demo: cluster
	@$(MAKE) bubblewrap || echo "The demo's pods will run WITHOUT isolation (see above)." >&2
	@$(PY) manage.py demo

# --- tests ------------------------------------------------------------------------------
chromium:
	@if [ -x "$(CHROMIUM)" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing Chromium for the browser tests (apt-get install chromium)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  [ -x "$(CHROMIUM)" ] || { echo "apt-get installed chromium, but $(CHROMIUM) is missing" >&2; exit 1; }; \
	else \
	  echo "The browser tests need Chromium at $(CHROMIUM). Install it with:" >&2; \
	  echo "    sudo apt-get update && sudo apt-get install -y chromium" >&2; \
	  echo "(or point CHROMIUM=/path/to/chromium at another build)" >&2; \
	  exit 1; \
	fi

# The pod sandbox: its tests are required, so `make test` installs bubblewrap, iproute2 (a
# network namespace per job), util-linux (setpriv, nsenter, prlimit) and nftables (pods of a
# job on several hosts) like Chromium.
bubblewrap:
	@if command -v bwrap && command -v ip && command -v setpriv && command -v nsenter \
	  && command -v prlimit && command -v nft; then exit 0; fi >/dev/null 2>&1; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing the pod sandbox's tools (apt-get install bubblewrap iproute2 util-linux nftables)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    bubblewrap iproute2 util-linux nftables >/dev/null; \
	else \
	  echo "The sandbox tests need bubblewrap, iproute2, util-linux and nftables, and root:" >&2; \
	  echo "    sudo apt-get update && sudo apt-get install -y bubblewrap iproute2 util-linux nftables" >&2; \
	  exit 1; \
	fi

# The reverse proxy's tests (tests/integration/test_reverse_proxy.py) run the real nginx with
# compose's config: installed like Chromium.
nginx:
	@if command -v nginx || [ -x /usr/sbin/nginx ]; then exit 0; fi >/dev/null 2>&1; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing nginx for the reverse proxy tests (apt-get install nginx)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null; \
	else \
	  echo "The reverse proxy tests need nginx:" >&2; \
	  echo "    sudo apt-get update && sudo apt-get install -y nginx" >&2; \
	  exit 1; \
	fi

test: install-test translations gettext chromium bubblewrap nginx
	@status=0; PAIWEB_CHROMIUM="$(CHROMIUM)" $(PY) -m pytest $(PYTEST_ARGS) || status=$$?; \
	if [ $$status = 5 ]; then echo "pytest collected no tests: that counts as a failure" >&2; fi; \
	exit $$status

# The API tests against the SDK versions the seed pins, in a venv of their own.
test-api-pinned:
	@$(MAKE) install-test translations VENV=$(PINNED_VENV)
	@$(PINNED_VENV)/bin/python -m pip --disable-pip-version-check install --quiet \
	  --progress-bar off $(PINNED_SDKS)
	@$(PINNED_VENV)/bin/python -m pip --disable-pip-version-check list 2>/dev/null \
	  | grep -i -E '^alibabacloud[_-](pai[_-]dlc|aiworkspace)' || true
	@status=0; $(PINNED_VENV)/bin/python -m pytest tests/api $(PYTEST_ARGS) || status=$$?; \
	if [ $$status = 5 ]; then echo "pytest collected no tests in tests/api" >&2; fi; \
	exit $$status

# ruff's rules and its formatter over everything; mypy over the pure cores, services and tasks
# ([tool.mypy]; its Django plugin imports the settings, which want DEBUG or a SECRET_KEY).
lint: install-test
	@$(PY) -m ruff check .
	@$(PY) -m ruff format --check .
	@DEBUG=true $(PY) -m mypy

clean:
	rm -rf $(VENV) $(PINNED_VENV) staticfiles .pytest_cache .ruff_cache
