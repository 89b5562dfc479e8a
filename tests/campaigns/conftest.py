"""Fixtures of the campaigns app's tests: clients for an anonymous visitor, a logged-in non-staff
user and a staff organizer."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

User = get_user_model()


@pytest.fixture(autouse=True)
def fresh_tables_cache():
    """dashboard.cached_tables keeps a campaign's tables for 2 s by its id; a test database
    rolled back hands the next test's campaign the same id, which would read the previous
    test's tables (test_run_page after test_dashboard did)."""
    from swarm_app.web import dashboard

    dashboard._tables_cache.clear()


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
