"""A password hasher for the test process only (tests/conftest.py installs it).

Django's PBKDF2 with 1,000,000 iterations takes 0.45 s per hash on CI's cores, and more while the
two suites share them: the login-throttling tests alone hash about 100 wrong passwords. This one
writes the same ``pbkdf2_sha256$<iterations>$<salt>$<hash>`` format with 1,000 iterations, so
every server and Celery worker a test starts (production settings, Django's own hasher) verifies
the test's users' passwords unchanged; nothing the tests check depends on the iteration count.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1_000
