"""Fixtures of the campaigns app's tests: clients for an anonymous visitor, a logged-in non-staff
user and a staff organizer."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

User = get_user_model()


@pytest.fixture
def staff(db) -> Client:
    user = User.objects.create_user("organizer", password="pw-organizer", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def member(db) -> Client:
    user = User.objects.create_user("viewer", password="pw-viewer")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def anonymous(db) -> Client:
    return Client()
