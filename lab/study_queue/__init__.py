"""The SAPO study's cells on Celery (issue #50): ``swarm-worker study --executor celery`` (and
``swarm-worker heterogeneous --executor celery``) sends each cell as a task to the ``study``
queue; any Celery worker started with ``celery -A study_queue worker -Q study --pool solo`` on a
machine with the ``study-queue`` extra and the models runs it (docs/study-queue.md).

Apart from ``worker`` (which imports no Celery) and from ``swarm_app`` (the coordinator never
imports the learner): import-linter's contracts in pyproject.toml. :mod:`study_queue.tasks` holds
the Celery app and the task a worker runs; :mod:`study_queue.submit` the submitting side, which
alone writes the results file.
"""

from study_queue.tasks import app

__all__ = ["app"]
