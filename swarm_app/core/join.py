"""The lines a volunteer types to join: the install line and the join line, with the address
volunteers reach (SWARM_PUBLIC_URL), never the host a page was browsed at unless the setting is
missing (and then the pages say so). One place for the organizer's token page, the volunteer's
token page and a campaign's "Join this campaign" section."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

# README's volunteer install line: the worker only (torch, transformers, reasoning-gym).
INSTALL_LINE = "pip install 'swarm-sapo[worker] @ git+{repository}'"


def join_url(request: HttpRequest) -> str:
    """The coordinator's address for a join line: SWARM_PUBLIC_URL, else the address being
    browsed (a fallback: check :func:`public_url_set` and warn)."""
    return settings.SWARM_PUBLIC_URL or request.build_absolute_uri("/")


def absolute(request: HttpRequest, path: str) -> str:
    """``path`` (from /) at the address of :func:`join_url` (an invite link)."""
    return join_url(request).rstrip("/") + path


def public_url_set() -> bool:
    return bool(settings.SWARM_PUBLIC_URL)


def install_line() -> str:
    """The install line, with the repository from SWARM_REPOSITORY_URL."""
    return INSTALL_LINE.format(repository=settings.SWARM_REPOSITORY_URL)


def join_line(url: str, secret: str) -> str:
    """The exact command a volunteer runs with a new token."""
    return f"swarm-worker join {url} --token {secret}"
