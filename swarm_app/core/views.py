"""The health check used by load balancers, the demo and tests (the home page is the status page),
and the volunteers' install script and worker wheel (swarm_app/core/join.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from swarm_app.core import health, join
from worker import __version__


def _health(request: HttpRequest, required: tuple[str, ...]) -> JsonResponse:
    parts = health.parts()
    ok = all(parts[name]["ok"] for name in required)
    body = {
        "ok": ok,
        "version": __version__,
        "mode": "embedded" if settings.EMBEDDED else "production",
        "database": connection.vendor,
        "parts": parts,
    }
    return JsonResponse(body, status=200 if ok else 503)


def healthz(request: HttpRequest) -> JsonResponse:
    """For load balancers: 200 while the database answers (this server can serve; workers keep
    training through a Redis outage), 503 otherwise; every part's state in ``parts``."""
    return _health(request, ("database",))


def healthz_all(request: HttpRequest) -> JsonResponse:
    """For monitors: 200 only while every part answers (database, Redis, beat, a Celery worker
    of the default queue: swarm_app/core/health.py), else 503."""
    return _health(request, health.PARTS)


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
