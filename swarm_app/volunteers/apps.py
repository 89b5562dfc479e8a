from django.apps import AppConfig


class VolunteersConfig(AppConfig):
    """Volunteer accounts, self-service tokens, credit, leaderboards and node pages."""

    name = "swarm_app.volunteers"
    label = "volunteers"
