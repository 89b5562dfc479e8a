"""Volunteer sign-up: Django's auth (username and password; email optional), a public display
name, and a throttle on the sign-up form.

Throttling: logins (the site's and the admin's) are throttled by django-axes, already the
project's login throttle (settings.py: LOGIN_FAILURE_LIMIT wrong passwords per address and
window, kept in the database). axes counts failed *logins* only, so sign-ups have their own
throttle here: at most SIGNUP_LIMIT forms sent per client address per SIGNUP_WINDOW_SECONDS,
counted in the database (``SignupAttempt``), the store every daphne process and host shares;
Django's cache is per process in this project (local memory), so a cache-based throttle would
let each process count on its own.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm
from django.db import connection, transaction
from django.http import HttpRequest
from django.utils import timezone

from swarm_app.campaigns.models import Campaign
from swarm_app.volunteers.models import SignupAttempt, Volunteer

DISPLAY_NAME = re.compile(r"^[\w][\w .\-]{0,38}[\w.]$|^\w$")


def clean_display_name(value: str, exclude_user_id: int | None = None) -> str:
    """A display name as shown to everyone: 1-40 letters, digits, spaces, dots, dashes or
    underscores, starting with a letter or digit, unique whatever the case."""
    value = " ".join(value.split())
    if not DISPLAY_NAME.match(value):
        raise forms.ValidationError(
            "1 to 40 letters, digits, spaces, dots, dashes or underscores, starting with a letter or digit."
        )
    taken = Volunteer.objects.filter(display_name__iexact=value)
    if exclude_user_id is not None:
        taken = taken.exclude(user_id=exclude_user_id)
    if taken.exists():
        raise forms.ValidationError("This display name is taken.")
    return value


class SignupForm(UserCreationForm):
    """Username and password (Django's validators), optional email, public display name."""

    email = forms.EmailField(required=False, help_text="optional; only for password reset, never shown")
    display_name = forms.CharField(
        max_length=40, help_text="shown on leaderboards and your page instead of your username"
    )

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "email")

    def clean_display_name(self) -> str:
        return clean_display_name(self.cleaned_data["display_name"])

    @transaction.atomic
    def save(self, commit: bool = True):
        user = super().save(commit=True)
        Volunteer.objects.create(user=user, display_name=self.cleaned_data["display_name"])
        return user


class DisplayNameForm(forms.Form):
    display_name = forms.CharField(max_length=40)

    def __init__(self, *args, user_id: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.user_id = user_id

    def clean_display_name(self) -> str:
        return clean_display_name(self.cleaned_data["display_name"], exclude_user_id=self.user_id)


class TokenForm(forms.Form):
    """The token a volunteer asks for on My tokens: which campaign (whether they may join it is
    tokens.create's to say) and a name of their choosing."""

    campaign = forms.ModelChoiceField(
        queryset=Campaign.objects.all(),
        error_messages={"required": "Choose a campaign.", "invalid_choice": "Choose a campaign."},
    )
    name = forms.CharField(max_length=120, required=False)


def signup_enabled() -> bool:
    """The site's switch (SWARM_VOLUNTEER_SIGNUP)."""
    return settings.SWARM_VOLUNTEER_SIGNUP


def client_address(request: HttpRequest) -> str:
    """The client's address as daphne reports it (behind nginx, --proxy-headers takes it from
    X-Forwarded-For), as django-axes counts logins."""
    return request.META.get("REMOTE_ADDR") or "0.0.0.0"


def signup_allowed(request: HttpRequest) -> bool:
    """Count this sign-up form; False once the address sent SIGNUP_LIMIT within the window
    (refused forms are not counted, so a refusal does not extend the wait)."""
    address = client_address(request)
    since = timezone.now() - timedelta(seconds=settings.SIGNUP_WINDOW_SECONDS)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # One address's forms are counted one at a time (SQLite's IMMEDIATE transactions,
            # settings.py, already are): forms sent at once would all count below the limit
            # before any of them is stored.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"signup {address}"])
        SignupAttempt.objects.filter(created_at__lt=since).delete()  # the table stays one window long
        if (
            SignupAttempt.objects.filter(address=address, created_at__gte=since).count()
            >= settings.SIGNUP_LIMIT
        ):
            return False
        SignupAttempt.objects.create(address=address)
    return True


def display_name_of(user) -> str:
    """The user's public name ("" without a volunteer profile: staff)."""
    try:
        return user.volunteer.display_name
    except Volunteer.DoesNotExist:
        return ""
