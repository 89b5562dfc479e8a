"""The campaign form after an invalid submit, in a real browser (Debian's chromium through
Playwright, tests/system/conftest.py): before issue #28 the page came back at the top, unchanged
to the eye, with the only error 1,749 px below. Now a summary at the top lists every problem in
the page's order, each linking to its field; the first invalid field has the focus, and a link
focuses its field; nothing is stored, and no Content-Security-Policy violation (the page
fixture fails on one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from swarm_app.campaigns.models import Campaign
from tests.servers import asgi_server

pytestmark = pytest.mark.slow

FOCUSED = "() => document.activeElement && document.activeElement.id"


@pytest.fixture
def site(transactional_db, tmp_path: Path):
    with asgi_server(tmp_path / "daphne.log", SERVE_STATIC="1") as base:
        yield base


def test_an_invalid_form_shows_its_problems_at_the_top_and_focuses_the_first(site, page):
    get_user_model().objects.create_user("organizer", password="pw-organizer-1", is_staff=True)
    page.goto(f"{site}/accounts/login/?next=/campaigns/new/")
    page.fill("#id_username", "organizer")
    page.fill("#id_password", "pw-organizer-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/campaigns/new/")

    # Three problems far apart: I + J = 0 (a rule), ε high below ε low (a GRPO rule) and a
    # learning rate past its bound, 1e6 (stored before issue #28).
    page.fill("#id_name", "invalid")
    page.fill("#id_num_local", "0")
    page.fill("#id_num_external", "0")
    page.fill("#id_learning_rate", "1000000")
    page.fill("#id_eps_low", "0.3")
    page.fill("#id_eps_high", "0.1")
    with page.expect_navigation():
        page.click("button.primary[type=submit]")
    assert not Campaign.objects.exists()

    summary = page.locator("#form-errors")
    assert summary.is_visible() and summary.get_attribute("role") == "alert"
    first_fieldset = page.locator("form.campaign-form fieldset").first.bounding_box()
    assert summary.bounding_box()["y"] < first_fieldset["y"]  # above every field
    links = [link.get_attribute("href") for link in summary.locator("a").all()]
    assert links == ["#field-num_local", "#field-learning_rate", "#field-eps_high"]  # the page's order
    assert "less than or equal to 0.01" in summary.inner_text()

    # The first invalid field has the focus, and is in view.
    assert page.evaluate(FOCUSED) == "id_num_local"
    assert page.locator("#id_num_local").is_visible()
    box = page.locator("#id_num_local").bounding_box()
    assert 0 <= box["y"] <= page.viewport_size["height"]

    # A link in the summary focuses its field's control.
    summary.locator("a[href='#field-eps_high']").click()
    assert page.evaluate(FOCUSED) == "id_eps_high"
    assert "must not be below" in page.inner_text("#field-eps_high .errorlist")
