"""The Swarm lab: the SAPO studies run on the worker's engine, outside the volunteer's package
(distribution ``swarm-sapo-lab``, lab/pyproject.toml). The table study's design, runner,
analysis and reports (``study*.py``), held-out evaluation of a cell (``held_out.py``), the
heterogeneous swarm (``heterogeneous*.py``) and their ``swarm-worker`` commands (``cli/``),
which the worker's command line finds through the ``swarm_worker.commands`` entry points.
Imports the worker (its engine, simulator and shared layer); the worker never imports it."""
