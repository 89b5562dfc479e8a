"""The pool table as PostgreSQL holds it (migration 0012): each record kept as the text sent
(``json``, compressed with lz4 where the server has it), and no foreign-key checks on the
append-only rows, whose one writer takes their parents from rows it has just locked."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's catalog")


def _one(query: str) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(query)
        return cursor.fetchone()


def test_pool_records_are_json_text_compressed_with_lz4(db):
    column_type, compression = _one(
        "SELECT atttypid::regtype::text, attcompression FROM pg_attribute "
        "WHERE attrelid = 'coordinator_poolrollout'::regclass AND attname = 'record'"
    )
    assert column_type == "json"
    lz4_built = _one(
        "SELECT count(*) FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
    )[0]
    assert compression == ("l" if lz4_built else "")


def test_pool_rows_carry_no_foreign_key_checks(db):
    (foreign_keys,) = _one(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = 'coordinator_poolrollout'::regclass AND contype = 'f'"
    )
    assert foreign_keys == 0
