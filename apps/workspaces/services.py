"""Writes to AccessKeys: create (the secret is returned once and stored encrypted),
disable, enable, delete."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.views.decorators.debug import sensitive_variables

from apps.core.errors import ApplicationError
from apps.core.timezones import valid_zone
from apps.core.words import say
from apps.workspaces.models import AccessKey, UserPreference

MAX_ACCESS_KEYS_PER_USER = 5


@sensitive_variables("secret")
@transaction.atomic
def access_key_create(*, user, description: str = "") -> tuple[AccessKey, str]:
    """A new enabled key for `user`, and its secret: the only time the plain secret exists
    outside the request that signs with it."""
    if AccessKey.objects.select_for_update().filter(user=user).count() >= MAX_ACCESS_KEYS_PER_USER:
        raise ApplicationError(
            "AccessKeyLimitExceeded",
            say(
                "You already have {most} access keys; delete one first.",
                most=MAX_ACCESS_KEYS_PER_USER,
            ),
            status=409,
        )
    key_id, secret = AccessKey.new_pair()
    key = AccessKey(user=user, key_id=key_id, description=description.strip())
    key.set_secret(secret)
    key.save()
    return key, secret


def access_key_disable(*, key: AccessKey) -> AccessKey:
    """Signatures made with a disabled key are refused from the next request on."""
    AccessKey.objects.filter(pk=key.pk).update(enabled=False)
    key.enabled = False
    return key


def access_key_enable(*, key: AccessKey) -> AccessKey:
    AccessKey.objects.filter(pk=key.pk).update(enabled=True)
    key.enabled = True
    return key


def access_key_delete(*, key: AccessKey) -> None:
    """Only a disabled key may be deleted, so a key in use is never lost with one click."""
    if key.enabled:
        raise ApplicationError(
            "AccessKeyEnabled",
            say("Disable {key_id} before deleting it.", key_id=key.key_id),
            status=409,
        )
    key.delete()


def user_time_zone_set(*, user, time_zone: str) -> None:
    """Save the zone the user's pages show times in ("" to follow the browser's). The name
    must be an IANA zone."""
    if time_zone and valid_zone(time_zone) is None:
        raise ApplicationError(
            "InvalidParameter",
            say("{time_zone} is not a time zone name", time_zone=f"{time_zone[:64]!r}"),
            field="time_zone",
        )
    UserPreference.objects.update_or_create(user=user, defaults={"time_zone": time_zone})


def user_language_set(*, user, language: str) -> None:
    """Save the language the user's pages speak ("" to follow the browser's): one of
    settings.LANGUAGES."""
    if language and language not in dict(settings.LANGUAGES):
        raise ApplicationError(
            "InvalidParameter",
            say("{language} is not a language here", language=f"{language[:16]!r}"),
            field="language",
        )
    UserPreference.objects.update_or_create(user=user, defaults={"language": language})
