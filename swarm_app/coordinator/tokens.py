"""Worker tokens: generated once, shown once, stored as a SHA-256 digest, revocable.

Tokens are 256-bit random secrets, so a fast digest is enough (no password stretching is
needed against guessing); lookups are by digest, so comparing secrets never happens in Python.
"""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction
from django.utils import timezone

from swarm_app.campaigns.models import Campaign, ControlRun
from swarm_app.coordinator.models import WorkerToken
from worker.shared.protocol import ErrorCode, ProtocolError

TOKEN_PREFIX = "swt_"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def create_token(
    campaign: Campaign, label: str = "", ban_scope: str = WorkerToken.BanScope.TOKEN
) -> tuple[WorkerToken, str]:
    """A new token for ``campaign``; returns it with the secret, which is never stored.

    ``ban_scope``: what a ban of one of its nodes bans (WorkerToken.BanScope)."""
    secret = new_secret()
    token = WorkerToken.objects.create(
        campaign=campaign,
        label=label,
        token_hash=digest(secret),
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        ban_scope=WorkerToken.BanScope(ban_scope),
    )
    return token, secret


def renew_control_token(run: ControlRun) -> str:
    """A new secret for the token of ``run``'s node (made with its first start): a copy of the
    control started before cannot say hello again."""
    secret = new_secret()
    WorkerToken.objects.update_or_create(
        control_run=run,
        defaults={
            "campaign_id": run.campaign_id,
            "label": f"control {run.arm} {run.tier} seed {run.seed}",
            "token_hash": digest(secret),
            "prefix": secret[: len(TOKEN_PREFIX) + 6],
            "ban_scope": WorkerToken.BanScope.NODE,
        },
    )
    return secret


def authenticate(secret: str) -> WorkerToken:
    token = (
        WorkerToken.objects.select_related("campaign", "control_run")
        .filter(token_hash=digest(secret))
        .first()
    )
    if token is None:
        raise ProtocolError(
            ErrorCode.INVALID_TOKEN, "unknown worker token; ask the campaign's organizer for one"
        )
    if token.revoked:
        raise ProtocolError(
            ErrorCode.TOKEN_REVOKED, f"token {token.prefix}… was revoked on {token.revoked_at:%Y-%m-%d}"
        )
    if token.banned:
        raise ProtocolError(
            ErrorCode.BANNED,
            f"token {token.prefix}… was banned on {token.banned_at:%Y-%m-%d}: {token.ban_reason}",
        )
    return token


def revoke(token: WorkerToken, by: str = "the campaign's organizer") -> None:
    """Revoke ``token``: new hellos are refused, and its live connections are closed (error
    ``token_revoked``, close code 4001) within a second, on every ASGI server."""
    from swarm_app.coordinator.groups import end_sessions, token_group

    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    message = f"token {token.prefix}… was revoked by {by}"
    transaction.on_commit(lambda: end_sessions(token_group(token.pk), ErrorCode.TOKEN_REVOKED, message))
