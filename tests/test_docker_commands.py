"""`facet base-image` and `facet docker-cleanup` against the real Docker Engine."""
import os

import pytest
from django.conf import settings
from django.core.management import call_command

from facet_site.lib import docker_engine as de

pytestmark = pytest.mark.docker


@pytest.fixture
def engine():
    try:
        client = de.connect(settings.DOCKER_HOST)
    except de.EngineUnavailable as exc:
        if os.environ.get("FACET_REQUIRE_DOCKER") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    yield client
    client.close()


def test_base_image_is_built_once_and_then_reported_ready(engine, capsys):
    call_command("base-image")
    assert "Base image ready: facet-base:bookworm" in capsys.readouterr().out
    assert de.find_image(engine, de.BASE_IMAGE_TAG) is not None


def test_cleanup_removes_labelled_leftovers(engine, capsys):
    call_command("base-image")
    container = engine.containers.create(
        de.BASE_IMAGE_TAG, ["sleep", "60"], network_mode="none",
        labels={de.LABEL_SANDBOX: "1", de.LABEL_OWNER: "pytest-cleanup-command"},
    )
    call_command("docker-cleanup")
    assert "Removed" in capsys.readouterr().out
    with pytest.raises(Exception):
        engine.containers.get(container.id)


def test_pulling_a_base_image_from_an_unreachable_registry_fails_clearly(engine):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--pull registry.invalid/facet/base:1: the registry did not answer"):
        call_command("base-image", "--pull", "registry.invalid/facet/base:1")
