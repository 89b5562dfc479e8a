"""Template context for every page: whether the header offers sign-up."""

from __future__ import annotations

from django.http import HttpRequest

from swarm_app.volunteers.accounts import signup_enabled


def signup(request: HttpRequest) -> dict[str, bool]:
    return {"signup_enabled": signup_enabled()}
