"""The health check used by load balancers, the demo and tests (the home page is the status page),
and the volunteers' install script and worker wheel (swarm_app/core/join.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from swarm_app.core import join
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


def join_script(request: HttpRequest) -> HttpResponse:
    """The install-and-join script that the join command pipes into sh."""
    return HttpResponse(join.install_script(join.join_url(request)), content_type="text/x-shellscript")


def worker_wheel(request: HttpRequest, filename: str) -> HttpResponse:
    """This coordinator's worker wheel (the join script names it with its hash)."""
    wheel = join.worker_wheel()
    if filename != wheel.filename:
        raise Http404(f"this coordinator serves {wheel.filename}")
    response = HttpResponse(wheel.data, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{wheel.filename}"'
    return response
