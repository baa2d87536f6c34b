import os

import pytest
from django.conf import settings

from facet_site.lib import docker_engine as de


@pytest.fixture(scope="session")
def client():
    """The Docker Engine; tests that need it skip without one, unless FACET_REQUIRE_DOCKER=1 (CI)."""
    try:
        engine = de.connect(settings.DOCKER_HOST)
    except de.EngineUnavailable as exc:
        if os.environ.get("FACET_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{exc} (FACET_REQUIRE_DOCKER=1): {exc.detail}")
        pytest.skip(str(exc))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def base_image(client):
    de.ensure_base_image(client, data_dir=settings.DATA_DIR)
    return de.BASE_IMAGE_TAG
