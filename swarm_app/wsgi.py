"""WSGI entry point for management tooling that expects one; the coordinator runs on ASGI."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "swarm_app.settings")
application = get_wsgi_application()
