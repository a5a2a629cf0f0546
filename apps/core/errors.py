from __future__ import annotations

from apps.core.words import say


class ApplicationError(Exception):
    """A refused request or an illegal transition, with a DLC-style code.

    `field` names the input at fault (a form field or an API parameter) so the console can
    show the message beside it and the API can name it; `status` is the HTTP status the API
    answers with.
    """

    def __init__(
        self, code: str, message: str, *, field: str | None = None, status: int = 400
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.status = status

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class ValidationFailed(ApplicationError):
    """Several field errors at once: `errors` maps a field path to its messages."""

    def __init__(self, errors: dict[str, list[str]], *, code: str = "InvalidParameter") -> None:
        first_field, messages = next(iter(errors.items()))
        super().__init__(code, messages[0], field=first_field)
        self.errors = errors

    def __str__(self) -> str:
        return "; ".join(f"{f}: {m}" for f, ms in self.errors.items() for m in ms)


def not_found(entity: str, ident: str) -> ApplicationError:
    """404 `EntityNotExist.<entity>`: for what does not exist, what belongs to a workspace the
    caller cannot see, and what another request deleted while this one was at work."""
    return ApplicationError(
        f"EntityNotExist.{entity}", _missing(entity, repr(ident[:64])), status=404
    )


def _missing(entity: str, ident: str) -> str:
    """What a reader is told is missing, in words: "the job template", not "the jobtemplate"."""
    if entity == "Job":
        return say("The job {ident} does not exist.", ident=ident)
    if entity == "JobTemplate":
        return say("The job template {ident} does not exist.", ident=ident)
    if entity == "Pod":
        return say("The pod {ident} does not exist.", ident=ident)
    if entity == "Workspace":
        return say("The workspace {ident} does not exist.", ident=ident)
    return say("The {entity} {ident} does not exist.", entity=entity, ident=ident)
