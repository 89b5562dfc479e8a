"""Deployment checks for what an operator can leave behind unnoticed (``manage.py check --deploy``,
which every daphne start command runs with ``--fail-level WARNING``, docs/deploy.md):

* swarm.W001: an example host name (platform/.env.example's ``swarm.example.org``, or any
  RFC 2606 example domain) or ``CHANGE_ME`` left in a setting that volunteers or browsers use;
* swarm.W002: ``SWARM_PUBLIC_URL`` unset in production: the join command would show whatever
  address an organizer browsed;
* swarm.W003: ``SWARM_CONTROL_SLOTS`` below the controls that the campaign form's default or one
  of its presets starts: some controls would wait for others to finish and train at another time
  than the swarm they are compared with.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register

from worker.shared.campaign import CAMPAIGN_PRESETS, CampaignConfig

PLACEHOLDER = "CHANGE_ME"
# RFC 2606 / RFC 6761: names reserved for examples, never a real coordinator.
EXAMPLE_DOMAINS = ("example", "example.org", "example.com", "example.net")


def is_example_host(host: str) -> bool:
    host = host.lower().strip().lstrip(".").split(":")[0]
    return any(host == domain or host.endswith(f".{domain}") for domain in EXAMPLE_DOMAINS)


def _example_values() -> list[tuple[str, str]]:
    """(setting, value) for each value that still holds an example or placeholder."""
    found = []
    for name in ("SWARM_PUBLIC_URL", "CONTROL_URL"):
        value = getattr(settings, name)
        if value and (PLACEHOLDER in value or is_example_host(urlsplit(value).hostname or "")):
            found.append((name, value))
    for name in ("ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS"):
        for value in getattr(settings, name):
            host = urlsplit(value).hostname if "://" in value else value
            if PLACEHOLDER in value or is_example_host(host or ""):
                found.append((name, value))
    return found


@register(Tags.security, deploy=True)
def check_example_values(app_configs, **kwargs) -> list[CheckMessage]:
    return [
        Warning(
            f"{name} holds {value!r}, an example value: volunteers' join command and the pages "
            "would name a host that is not yours.",
            hint="Replace every CHANGE_ME and swarm.example.org of platform/.env.example with your "
            "own values (docs/deploy.md).",
            id="swarm.W001",
        )
        for name, value in _example_values()
    ]


@register(Tags.security, deploy=True)
def check_public_url(app_configs, **kwargs) -> list[CheckMessage]:
    if settings.EMBEDDED or settings.SWARM_PUBLIC_URL:
        return []
    return [
        Warning(
            "SWARM_PUBLIC_URL is not set: the join command on the campaign and token pages shows "
            "the address each visitor browses, which volunteers may not reach.",
            hint="Set SWARM_PUBLIC_URL to the coordinator's public address, e.g. https://swarm.your.org/.",
            id="swarm.W002",
        )
    ]


def campaigns_to_size_for() -> dict[str, int]:
    """Controls that a launch starts, for the campaign form's default and each preset."""
    counts = {"the campaign form's default": CampaignConfig().control_run_count()}
    counts.update(
        {f"the {name} preset": preset().control_run_count() for name, preset in CAMPAIGN_PRESETS.items()}
    )
    return counts


@register(deploy=True)
def check_control_slots(app_configs, **kwargs) -> list[CheckMessage]:
    too_many = {
        campaign: count
        for campaign, count in campaigns_to_size_for().items()
        if count > settings.CONTROL_SLOTS
    }
    if not too_many:
        return []
    listed = ", ".join(f"{campaign}: {count}" for campaign, count in too_many.items())
    return [
        Warning(
            f"SWARM_CONTROL_SLOTS={settings.CONTROL_SLOTS}: a controls worker runs that many controls "
            f"at once, fewer than a launch starts ({listed}); the others would wait and train after "
            "the swarm they are compared with.",
            hint=f"Set SWARM_CONTROL_SLOTS to {max(too_many.values())} or more (the start commands pass "
            "it as --concurrency).",
            id="swarm.W003",
        )
    ]
