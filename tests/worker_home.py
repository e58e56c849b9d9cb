"""A pytest plugin (`-p tests.worker_home`, pyproject's addopts) loaded before Django is set
up: under pytest-xdist (`make test` runs two workers), each worker gets an ETHAN_HOME of its
own, so that what the tests keep there (the throttles' file cache, which every test clears,
the secret key) is never another worker's."""

from __future__ import annotations

import os

worker = os.environ.get("PYTEST_XDIST_WORKER")
if worker and os.environ.get("ETHAN_HOME"):
    os.environ["ETHAN_HOME"] = os.path.join(os.environ["ETHAN_HOME"], worker)
