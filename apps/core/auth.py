"""Sign-in throttling for every login form (the console's and the admin's) and for the
current password the password change asks for, and the client address that throttles count
against (apps/core/throttle.py holds the rule).

The backend is Django's ModelBackend behind the throttle: a username with too many recent
failures (from any address), or an address with too many (across usernames), is refused
before the password is hashed, so a locked sign-in costs no CPU. Unknown usernames count
exactly like known ones: the answer never tells whether an account exists. A success resets
the username's count, never the address's (an attacker signing in to an account of their
own must not wipe the failures they made on others).

A refusal is noted on the request; the login forms show its message and `throttled_login`
answers it with 429 (or 503 when Redis, the shared store, does not answer).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import forms as auth_forms
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from redis import RedisError

from apps.core.redis import redis_client
from apps.core.throttle import (
    Lock,
    Rule,
    Scope,
    throttle_check,
    throttle_fail,
    throttle_reset,
)

logger = logging.getLogger(__name__)

LOGIN_USER = "login-user"
LOGIN_ADDRESS = "login-address"


def client_address(request: HttpRequest) -> str:
    """REMOTE_ADDR; behind TRUSTED_PROXY_COUNT proxies, the entry of X-Forwarded-For that
    the outermost trusted proxy appended (the n-th from the right: entries further left
    are whatever the client sent). An IPv6 address counts as its /64, which one host
    usually holds whole."""
    address = request.META.get("REMOTE_ADDR") or ""
    proxies = settings.TRUSTED_PROXY_COUNT
    if proxies:
        forwarded = [
            part.strip()
            for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
            if part.strip()
        ]
        if forwarded:
            address = forwarded[-min(proxies, len(forwarded))]
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:100] or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def throttle_scope(kind: str, ident: str, *, limit: int) -> Scope:
    """A scope under THROTTLE_WINDOW_SECONDS, in this installation's key namespace."""
    return Scope(
        kind,
        ident,
        Rule(limit, settings.THROTTLE_WINDOW_SECONDS),
        namespace=settings.THROTTLE_KEY_PREFIX,
    )


def login_scopes(*, username: str, address: str | None) -> list[Scope]:
    """The username's scope first; the address's when the attempt came over HTTP."""
    scopes = [throttle_scope(LOGIN_USER, username, limit=settings.LOGIN_THROTTLE_PER_USERNAME)]
    if address is not None:
        scopes.append(
            throttle_scope(LOGIN_ADDRESS, address, limit=settings.LOGIN_THROTTLE_PER_ADDRESS)
        )
    return scopes


@dataclass(frozen=True, slots=True)
class LoginRefusal:
    message: str
    status: int
    retry_after: int | None = None


def throttled_attempt[T](
    request: HttpRequest | None,
    *,
    username: str,
    attempt: Callable[[], T | None],
    locked: Callable[[Lock, float], str],
) -> T | None:
    """Try a password for `username` under the sign-in throttle: refused (PermissionDenied,
    the refusal noted on the request) while the username or the address is locked, else
    `attempt()`, whose None counts as a failure and whose success resets the username's
    count. `locked(lock, now)` says why a locked attempt was refused."""
    now = timezone.now().timestamp()
    scopes = login_scopes(
        username=username, address=client_address(request) if request is not None else None
    )
    try:
        check = throttle_check(store=redis_client(), scopes=scopes, now=now)
    except RedisError:
        logger.exception("Redis is unavailable: sign-ins cannot be throttled")
        _refuse(
            request,
            LoginRefusal(gettext("Sign-in is unavailable for a moment. Try again shortly."), 503),
        )
    if (lock := check.lock) is not None:
        _refuse(
            request,
            LoginRefusal(locked(lock, now), status=429, retry_after=lock.seconds_left(now)),
        )
    result = attempt()
    try:
        if result is None:
            throttle_fail(store=redis_client(), scopes=scopes, now=now)
        elif to_reset := check.to_reset(scopes[:1]):
            throttle_reset(store=redis_client(), scopes=to_reset)
    except RedisError:
        logger.exception("Redis is unavailable: a sign-in was not counted")
    return result


def _sign_in_locked(lock: Lock, now: float) -> str:
    minutes = lock.minutes_left(now)
    if lock.scope.kind == LOGIN_USER:
        text = ngettext(
            "Too many failed sign-ins for this account. Try again in %(minutes)d minute.",
            "Too many failed sign-ins for this account. Try again in %(minutes)d minutes.",
            minutes,
        )
    else:
        text = ngettext(
            "Too many failed sign-ins from your address. Try again in %(minutes)d minute.",
            "Too many failed sign-ins from your address. Try again in %(minutes)d minutes.",
            minutes,
        )
    return text % {"minutes": minutes}


def _password_check_locked(lock: Lock, now: float) -> str:
    minutes = lock.minutes_left(now)
    if lock.scope.kind == LOGIN_USER:
        text = ngettext(
            "Too many wrong passwords for this account. Try again in %(minutes)d minute.",
            "Too many wrong passwords for this account. Try again in %(minutes)d minutes.",
            minutes,
        )
    else:
        text = ngettext(
            "Too many wrong passwords from your address. Try again in %(minutes)d minute.",
            "Too many wrong passwords from your address. Try again in %(minutes)d minutes.",
            minutes,
        )
    return text % {"minutes": minutes}


class ThrottledModelBackend(ModelBackend):
    """ModelBackend, refusing (PermissionDenied: no other backend is tried) while locked."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs,
    ):
        if username is None or password is None:
            return super().authenticate(request, username=username, password=password, **kwargs)
        check = functools.partial(
            super().authenticate, request, username=username, password=password, **kwargs
        )
        return throttled_attempt(request, username=username, attempt=check, locked=_sign_in_locked)


def _refuse(request: HttpRequest | None, refusal: LoginRefusal) -> NoReturn:
    if request is not None:
        request.login_refusal = refusal
    raise PermissionDenied(refusal.message)


class _ShowsRefusal:
    """A login form that says why a throttled sign-in was refused, instead of "wrong
    username or password"."""

    def get_invalid_login_error(self) -> ValidationError:
        refusal = getattr(self.request, "login_refusal", None)
        if refusal is not None:
            return ValidationError(refusal.message, code="throttled")
        return super().get_invalid_login_error()


class LoginForm(_ShowsRefusal, AuthenticationForm):
    pass


class AdminLoginForm(_ShowsRefusal, AdminAuthenticationForm):
    pass


class PasswordChangeForm(auth_forms.PasswordChangeForm):
    """The current password is checked under the sign-in throttle: a wrong one counts as a
    failed sign-in of the account (and of the address), and while either is locked it is
    not checked at all. Otherwise a session, stolen or left open, could guess it unlimited."""

    def __init__(self, user, *args, request: HttpRequest | None = None, **kwargs) -> None:
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self) -> str:
        old_password = self.cleaned_data["old_password"]
        try:
            right = throttled_attempt(
                self.request,
                username=self.user.get_username(),
                attempt=lambda: self.user.check_password(old_password) or None,
                locked=_password_check_locked,
            )
        except PermissionDenied as refused:
            raise ValidationError(str(refused), code="throttled") from None
        if not right:
            raise ValidationError(
                self.error_messages["password_incorrect"], code="password_incorrect"
            )
        return old_password


def throttled_login(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a login view: a refused sign-in answers with its status (429) and Retry-After."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        response = view(request, *args, **kwargs)
        refusal = getattr(request, "login_refusal", None)
        if refusal is not None and response.status_code == 200:
            response.status_code = refusal.status
            if refusal.retry_after is not None:
                response["Retry-After"] = str(refusal.retry_after)
        return response

    return wrapper
