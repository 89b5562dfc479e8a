"""A volunteer's own worker tokens: which campaigns they may join, and making and revoking
tokens there. Plain functions the views and the tests call.

A volunteer may make tokens for a campaign that is not finished and is either public and open
(``Campaign.volunteer_access``) or one whose invite link they opened (kept in their session).
Tokens they make ban as a whole (``ban_scope`` token): they are one person's.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator import tokens as coordinator_tokens
from swarm_app.coordinator.models import WorkerToken

# Active tokens one volunteer may hold per campaign: enough for several machines, not a flood.
MAX_ACTIVE_TOKENS = 20
SESSION_INVITES = "volunteer_invites"


class TokenError(Exception):
    """Why a volunteer may not make or revoke this token (shown to them as it is)."""


def joinable(invited: Iterable[int] = ()) -> QuerySet[Campaign]:
    """Campaigns a volunteer may make tokens for: not finished, and public and open, or invited."""
    from django.db.models import Q

    open_ = Q(public=True, volunteer_access=Campaign.VolunteerAccess.OPEN)
    return Campaign.objects.exclude(state__in=Campaign.FINISHED).filter(open_ | Q(pk__in=list(invited)))


def is_open(campaign: Campaign) -> bool:
    """Whether the campaign's page offers self-service joining to everyone."""
    return (
        campaign.public
        and campaign.volunteer_access == Campaign.VolunteerAccess.OPEN
        and not campaign.is_finished
    )


def create(user, campaign: Campaign, name: str, invited: Iterable[int] = ()) -> tuple[WorkerToken, str]:
    """A new token of ``user`` for ``campaign`` named ``name``; returns it with its secret (shown
    once, stored hashed). At most MAX_ACTIVE_TOKENS active ones, also under concurrent requests:
    the user's row is locked (PostgreSQL) and the token is stored before the count (on SQLite the
    insert takes the database's write lock), so a second request counts the first one's token."""
    if not joinable(invited).filter(pk=campaign.pk).exists():
        if campaign.is_finished:
            raise TokenError(f"Campaign {campaign.name!r} is {campaign.state}: it takes no new workers.")
        raise TokenError(f"Campaign {campaign.name!r} is invite-only: open its invite link first.")
    with transaction.atomic():
        list(get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk"))
        token, secret = coordinator_tokens.create_token(campaign, name.strip(), WorkerToken.BanScope.TOKEN)
        token.owner = user
        token.save(update_fields=["owner"])
        active = WorkerToken.objects.filter(owner=user, campaign=campaign, revoked_at__isnull=True).count()
        if active > MAX_ACTIVE_TOKENS:  # raised inside the transaction: the new token is undone
            raise TokenError(f"You hold {active - 1} active tokens for this campaign: revoke one first.")
    return token, secret


def owned(user) -> QuerySet[WorkerToken]:
    return WorkerToken.objects.filter(owner=user).select_related("campaign").order_by("-created_at")


def revoke(user, token_id: int) -> WorkerToken:
    """Revoke one of ``user``'s own tokens: its workers are disconnected at once."""
    token = owned(user).filter(pk=token_id).first()
    if token is None:
        raise TokenError("No such token of yours.")
    coordinator_tokens.revoke(token, by="its volunteer")
    return token


def new_invite_code(campaign: Campaign) -> str:
    """A fresh invite code for ``campaign`` (the old link stops working)."""
    campaign.invite_code = secrets.token_urlsafe(24)
    campaign.save(update_fields=["invite_code"])
    return campaign.invite_code


def accept_invite(campaign: Campaign, code: str) -> bool:
    """Whether ``code`` is the campaign's current invite code (compared in constant time, as
    bytes: compare_digest refuses str with non-ASCII characters, which a URL may carry)."""
    return bool(campaign.invite_code) and secrets.compare_digest(
        campaign.invite_code.encode(), code.encode("utf-8", "surrogatepass")
    )
