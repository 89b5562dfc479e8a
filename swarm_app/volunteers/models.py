"""A volunteer's public name, and the sign-up attempts its throttle counts."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower


class Volunteer(models.Model):
    """A signed-up account's public face: the display name leaderboards and pages show (never
    the username, the email or a token)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="volunteer")
    display_name = models.CharField(max_length=40)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(Lower("display_name"), name="one_display_name")]

    def __str__(self) -> str:
        return self.display_name


class SignupAttempt(models.Model):
    """One sign-up form sent (valid or not) from a client address: the throttle counts these in
    the database, the one store every server process shares (accounts.py)."""

    address = models.GenericIPAddressField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["address", "created_at"], name="signup_by_address")]

    def __str__(self) -> str:
        return f"sign-up from {self.address} at {self.created_at:%Y-%m-%d %H:%M:%S}"
