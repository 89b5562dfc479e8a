"""Fixtures of the volunteers' tests: the coordinator tests' running campaign and token, and a
signed-up volunteer."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from swarm_app.volunteers.models import Volunteer
from tests.coordinator.conftest import campaign, token  # noqa: F401 (fixtures)

PASSWORD = "a-volunteer's-pw-77"


@pytest.fixture
def volunteer(transactional_db) -> Volunteer:
    user = get_user_model().objects.create_user("ada", email="ada@example.org", password=PASSWORD)
    return Volunteer.objects.create(user=user, display_name="Ada L")
