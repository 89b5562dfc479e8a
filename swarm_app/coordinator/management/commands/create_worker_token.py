"""manage.py create_worker_token --campaign ID [--label TEXT]: print a new worker token once."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from swarm_app.campaigns.models import Campaign
from swarm_app.coordinator.tokens import create_token


class Command(BaseCommand):
    help = "Create a worker token for a campaign. The token is printed once and stored hashed."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--campaign", type=int, required=True, help="campaign id")
        parser.add_argument("--label", default="", help="who or what the token is for")

    def handle(self, *args, campaign: int, label: str, **options) -> None:
        try:
            target = Campaign.objects.get(pk=campaign)
        except Campaign.DoesNotExist:
            raise CommandError(f"no campaign with id {campaign}") from None
        if target.is_finished:
            raise CommandError(f"campaign {campaign} is {target.state}: no new workers can join")
        token, secret = create_token(target, label)
        self.stderr.write(
            f"token {token.prefix}… for campaign {target.pk} ({target.name}); shown once, store it now:"
        )
        self.stdout.write(secret)
