"""The pool's records compressed with lz4 instead of pglz on PostgreSQL 14+ (new rows only).

pglz compression of the 8 records of a submission was 5% of PostgreSQL's CPU per round at 1,000
volunteers (perf, docs/coordinator-bench.md); lz4 compresses several times faster. A server
built without lz4 keeps pglz. Nothing to do on SQLite.
"""

from django.db import DatabaseError, migrations, transaction


def records_in_lz4(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql" or connection.pg_version < 140000:
        return
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute("ALTER TABLE coordinator_poolrollout ALTER COLUMN record SET COMPRESSION lz4")
    except DatabaseError:  # PostgreSQL built without lz4
        pass


def records_in_pglz(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql" and connection.pg_version >= 140000:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE coordinator_poolrollout ALTER COLUMN record SET COMPRESSION pglz")


class Migration(migrations.Migration):
    dependencies = [("coordinator", "0010_node_credit_rows")]

    operations = [migrations.RunPython(records_in_lz4, records_in_pglz)]
