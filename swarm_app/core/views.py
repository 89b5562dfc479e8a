"""The health check used by load balancers, the demo and tests (the home page is the status page)."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse

from worker import __version__


def healthz(request: HttpRequest) -> JsonResponse:
    """200 with the mode and database vendor when the database answers; 503 otherwise."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database_ok = True
    except Exception:  # any database failure means "not healthy", whatever the driver raises
        database_ok = False
    body = {
        "ok": database_ok,
        "version": __version__,
        "mode": "embedded" if settings.EMBEDDED else "production",
        "database": connection.vendor,
    }
    return JsonResponse(body, status=200 if database_ok else 503)
