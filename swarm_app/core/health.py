"""The health of every part the coordinator needs, for /healthz, /healthz/all, /metrics and the
campaign page (docs/deploy.md, "Health"):

* ``database``: answers ``SELECT 1``;
* ``redis`` (production only, REDIS_URL set): answers PING within a second;
* ``beat``: Celery beat sent the heartbeat task within :func:`stale_after` seconds (beat stamps
  ``Heartbeat.sent_at`` as it publishes, swarm_app/celery.py);
* ``celery_worker``: a worker of the default queue ran a heartbeat no more than
  :func:`stale_after` seconds before the last one beat sent, i.e. housekeeping (liveness,
  campaign completion, dashboards, the pool's archive) is being run. With beat down this stays at
  what the last heartbeat showed.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import connection
from django.utils import timezone

HEARTBEAT_TASK = "core.heartbeat"
HEARTBEAT = "housekeeping"
PARTS = ("database", "redis", "beat", "celery_worker")


def stale_after() -> float:
    """Seconds after which a missing heartbeat means a part is down: three periods, plus slack
    for a busy worker."""
    return 3 * settings.HEALTH_HEARTBEAT_SECONDS + 10


def stamp(*, sent: bool = False, ran: bool = False) -> None:
    """Record that beat sent the heartbeat (``sent``) or a worker ran it (``ran``)."""
    from swarm_app.core.models import Heartbeat

    now = timezone.now()
    fields = {"sent_at": now} if sent else {}
    fields |= {"ran_at": now} if ran else {}
    Heartbeat.objects.update_or_create(name=HEARTBEAT, defaults=fields)


def _database() -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as error:  # any database failure means "down", whatever the driver raises
        return {"ok": False, "error": type(error).__name__}
    return {"ok": True, "vendor": connection.vendor}


def _redis() -> dict:
    if not settings.REDIS_URL:
        return {"ok": True, "used": False}
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError as error:
        return {"ok": False, "used": True, "error": str(error)[:200]}
    finally:
        client.close()
    return {"ok": True, "used": True}


def _age(moment: datetime | None, now: datetime) -> float | None:
    return None if moment is None else round((now - moment).total_seconds(), 1)


def _housekeeping(database_ok: bool) -> tuple[dict, dict]:
    from swarm_app.core.models import Heartbeat

    if not database_ok:
        unknown = {"ok": False, "error": "the database does not answer"}
        return unknown, unknown
    row = Heartbeat.objects.filter(name=HEARTBEAT).first()
    now = timezone.now()
    sent, ran = (row.sent_at, row.ran_at) if row else (None, None)
    limit = stale_after()
    sent_age, ran_age = _age(sent, now), _age(ran, now)
    beat = {"ok": sent_age is not None and sent_age <= limit, "last_sent_seconds_ago": sent_age}
    # A worker ran a heartbeat within the limit of the last one beat sent.
    worker = {
        "ok": sent is not None and ran is not None and (sent - ran).total_seconds() <= limit,
        "last_ran_seconds_ago": ran_age,
    }
    return beat, worker


def parts() -> dict[str, dict]:
    """Each part's state: ``ok`` and what was measured."""
    database = _database()
    beat, worker = _housekeeping(database["ok"])
    return {"database": database, "redis": _redis(), "beat": beat, "celery_worker": worker}


def housekeeping_running() -> bool:
    """Beat sends and a worker runs the housekeeping (the campaign page warns otherwise)."""
    beat, worker = _housekeeping(True)
    return beat["ok"] and worker["ok"]
