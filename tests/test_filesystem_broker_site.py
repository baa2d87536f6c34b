"""The site on its default broker, the filesystem one (facet_site/lib/filesystem_broker.py, tested
on its own in tests/lib/test_filesystem_broker.py): Celery connects through facet's transport, and a
starting worker removes the partial message files that writers killed mid-write left."""
import os
import time
from pathlib import Path

import pytest

from facet_site import recovery
from facet_site.celery import app
from facet_site.lib import filesystem_broker


def test_the_site_uses_this_transport_on_the_filesystem_broker(settings):
    if not settings.CELERY_BROKER_URL.startswith("filesystem://"):
        pytest.skip("CELERY_BROKER_URL names another broker")
    with app.connection_for_write() as conn:
        assert isinstance(conn.transport, filesystem_broker.Transport)
        assert conn.as_uri().startswith("facet-filesystem://")  # what the worker's banner shows
        assert conn.transport_options["damaged_folder"].endswith("damaged")


@pytest.mark.django_db
def test_a_starting_worker_removes_the_partial_files_of_dead_writers(settings):
    if getattr(settings, "CELERY_BROKER_TRANSPORT", "") != filesystem_broker.ALIAS:
        pytest.skip("CELERY_BROKER_URL names another broker")
    folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_out"])
    stale = folder / f".1_{os.getpid()}.default.msg{filesystem_broker.PARTIAL_SUFFIX}"
    stale.write_bytes(b'{"half')
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    try:
        assert str(stale) in recovery.remove_leftovers()
        assert not stale.exists()
    finally:
        stale.unlink(missing_ok=True)
