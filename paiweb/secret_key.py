"""SECRET_KEY and the AccessKey encryption secret, which never fall back to a public value.

Outside DEBUG both come from the environment, and every process (web, worker, beat, agent,
any `manage.py` command) refuses to start without a real SECRET_KEY. In DEBUG (development,
the demo, the tests) an unset one becomes this installation's own random secret: generated
once into VAR_DIR/secret-key (mode 0600) and read back by every later process. The web
server, the workers and the agents share VAR_DIR, so they agree on it, and even the demo
never signs sessions or encrypts AccessKey secrets with a key published in the source.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# The development key settings.py used to fall back to. It is public, so it counts as unset.
PUBLIC_DEFAULT_SECRET_KEY = "paiweb-insecure-development-key-change-me-in-production"
INSTALLATION_SECRET_FILE = "secret-key"
GENERATE = 'python -c "import secrets; print(secrets.token_urlsafe(50))"'
_MIN_GENERATED_LENGTH = 32
# The shortest secret accepted outside DEBUG: "changeme" or a word signs sessions that anyone
# who guesses it can forge. (Django's `check --deploy` asks for 50.)
MIN_LENGTH = 32


def given(name: str) -> bool:
    """Whether the environment sets `name` to something other than empty or the public key."""
    value = os.environ.get(name, "")
    return bool(value.strip()) and value.strip() != PUBLIC_DEFAULT_SECRET_KEY


def env_secret(name: str, *, debug: bool, var_dir: Path, default: str = "") -> str:
    """The secret the environment variable `name` holds. Unset, empty or the public default:
    `default` when one is given (another secret already checked), else in DEBUG this
    installation's generated secret, else ImproperlyConfigured."""
    if given(name):
        value = os.environ[name]
        if not debug and len(value.strip()) < MIN_LENGTH:
            raise ImproperlyConfigured(
                f"{name} is {len(value.strip())} characters long, and DEBUG is false: refusing "
                f"to start with a key that short (at least {MIN_LENGTH}). Set {name} to a long "
                f"random string, e.g. the output of: {GENERATE}"
            )
        return value
    public = os.environ.get(name, "").strip() == PUBLIC_DEFAULT_SECRET_KEY
    if public and not debug:
        raise ImproperlyConfigured(
            f"{name} is the public development default from the source, and DEBUG is false: "
            f"refusing to start. Set {name} to a long random string of your own, e.g. the "
            f"output of: {GENERATE}"
        )
    if default:
        return default
    if not debug:
        raise ImproperlyConfigured(
            f"{name} is not set, and DEBUG is false: refusing to start. Set {name} to a long "
            f"random string (the same for the web server, workers, beat and agents), e.g. "
            f"the output of: {GENERATE}"
        )
    return installation_secret(var_dir)


def installation_secret(var_dir: Path) -> str:
    """This installation's random secret, VAR_DIR/secret-key, created on first use."""
    path = Path(var_dir) / INSTALLATION_SECRET_FILE
    if not path.exists():
        _create(path, secrets.token_urlsafe(50))
    try:
        value = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ImproperlyConfigured(f"cannot read the installation secret {path}: {exc}") from None
    if len(value) < _MIN_GENERATED_LENGTH:
        raise ImproperlyConfigured(
            f"the installation secret {path} is empty or damaged: delete it to generate a new "
            "one (then re-apply the cluster file, which re-encrypts its AccessKey secrets), "
            "or set SECRET_KEY"
        )
    return value


def _create(path: Path, value: str) -> None:
    """Write `value` to `path` (mode 0600) unless it exists. Written to a private temporary
    file first and published with link(), which fails if the name exists: a process racing
    this one either wins or reads the winner's complete file, never a half-written one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    _write_new(temporary, value)
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass  # another process created it first: everyone uses that one
    except OSError:  # a filesystem without hard links: create the name itself, exclusively
        try:
            _write_new(path, value)
        except FileExistsError:
            pass
    finally:
        temporary.unlink(missing_ok=True)


def _write_new(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, (value + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
