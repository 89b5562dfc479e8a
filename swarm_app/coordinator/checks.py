"""Deployment check of the metrics token file (``manage.py check --deploy``, which the daphne
start commands run): swarm.E001 when METRICS_TOKEN_FILE is set and cannot be read or holds no
valid token (/metrics would answer 503). swarm_app/core/checks.py has the other deployment checks."""

from __future__ import annotations

from django.core.checks import CheckMessage, Error, register

from swarm_app.coordinator.scrape import metrics_token


@register(deploy=True)
def check_metrics_token_file(app_configs, **kwargs) -> list[CheckMessage]:
    try:
        metrics_token()
    except ValueError as error:
        return [
            Error(
                str(error),
                hint='Create it as docs/deploy.md ("Metrics") shows: one token of 32+ characters, '
                "readable by the coordinator's user and Prometheus.",
                id="swarm.E001",
            )
        ]
    return []
