"""Two statements of the coordinator's hot paths, written out instead of left to the ORM.

Profiling the submission path (bench/coordinator.py, docs/coordinator-bench.md) showed that on
the coordinator each ORM statement costs about as much Python as the database work itself, and
that the largest single cost of a submission was psycopg quoting its rollout records (tens of
kilobytes of JSON) into the SQL text, which Django's client-side binding does in Python.

* :func:`bump`: allocate a range from a per-campaign counter with ``UPDATE ... SET f = f + n
  ... RETURNING f``, one statement where the ORM needs an ``F()`` update and a read-back. The
  UPDATE locks the row until the surrounding transaction ends, so two servers never get
  overlapping ranges. PostgreSQL and SQLite (3.35+) both support ``RETURNING``.
* :func:`insert`: a multi-row INSERT whose values PostgreSQL receives as bound parameters
  (server-side binding: nothing is escaped in Python, and psycopg prepares the statement once
  it has seen it a few times). Values go through each field's own ``pre_save`` and
  ``get_db_prep_save``, as in ``bulk_create``. On other databases it is ``bulk_create``.

Both run on the connection Django holds, inside whatever transaction is open.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection, models

INSERT_BATCH = 500  # rows per statement: far below PostgreSQL's 65535 bound parameters


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


def bump(model: type[models.Model], pk: int, field: str, by: int) -> int:
    """Add ``by`` to ``model.field`` of row ``pk``; returns the new value."""
    table = _quote(model._meta.db_table)
    column = _quote(model._meta.get_field(field).column)
    key = _quote(model._meta.pk.column)
    with connection.cursor() as cursor:
        # Only names from the model's _meta are formatted in; values are bound parameters.
        cursor.execute(
            f"UPDATE {table} SET {column} = {column} + %s WHERE {key} = %s RETURNING {column}",
            [by, pk],
        )
        row = cursor.fetchone()
    if row is None:
        raise model.DoesNotExist(f"{model.__name__} {pk} does not exist")
    return int(row[0])


def insert(objs: Sequence[models.Model]) -> None:
    """Insert unsaved ``objs`` (one model, auto primary key); their pks are not set."""
    if not objs:
        return
    model = type(objs[0])
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs)
        return
    import psycopg  # the PostgreSQL backend's driver; not needed on SQLite

    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(_quote(f.column) for f in fields)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    connection.ensure_connection()
    # A plain psycopg cursor binds server-side, whatever cursor class Django was configured with;
    # wrap_database_errors turns psycopg's errors into Django's (IntegrityError, ...), as
    # Django's own cursors do.
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        for start in range(0, len(objs), INSERT_BATCH):
            batch = objs[start : start + INSERT_BATCH]
            params = [
                field.get_db_prep_save(field.pre_save(obj, True), connection)
                for obj in batch
                for field in fields
            ]
            cursor.execute(
                f"INSERT INTO {_quote(model._meta.db_table)} ({columns}) VALUES {', '.join([row] * len(batch))}",
                params,
            )
