"""The run form's task-construction settings: shown with their defaults, stored in the run's config,
and every bad value reported beside its own field (the API and CLI get the same checks)."""
import re

import pytest
from django.urls import reverse

from scenarios import services
from scenarios.models import SynthesisRun
from scenarios.run_config import DEFAULT_CONSTRUCTION, RunConfigError, construction_config

pytestmark = pytest.mark.django_db

FIELDS = ["auto_construct", "max_environment_repairs", "max_repair_rounds", "max_partials", "build_timeout_s",
          "solution_timeout_s", "verifier_timeout_s", "init_check_timeout_s"]


def start(client, **fields):
    data = {"name": "construct", "strategy": "forward", **fields}
    return client.post(reverse("scenarios:runs"), data)


def test_the_form_offers_the_construction_settings_with_their_defaults(client_as, corpus):
    html = client_as("reviewer").get(reverse("scenarios:runs")).content.decode()
    for name in FIELDS:
        assert f'name="{name}"' in html
    assert re.search(r'<input type="checkbox" name="auto_construct"[^>]*checked', html)  # on unless unticked
    assert 'name="max_repair_rounds" value="5"' in html and 'name="max_environment_repairs" value="3"' in html
    assert 'name="max_partials" value="3"' in html and 'name="build_timeout_s" value="600"' in html
    assert '<option value="reverse">' in html and '<option value="joint">' in html  # the artifact order


def test_the_settings_land_in_the_runs_config_and_drive_construction(client_as, corpus):
    response = start(client_as("reviewer"), strategy="joint", auto_construct="on", max_environment_repairs="1",
                     max_repair_rounds="2", max_partials="0", build_timeout_s="120", solution_timeout_s="45",
                     verifier_timeout_s="30", init_check_timeout_s="10")
    assert response.status_code == 302
    run = SynthesisRun.objects.get()
    assert run.strategy == "joint"
    assert run.config["construction"] == {
        "auto": True, "max_environment_repairs": 1, "max_repair_rounds": 2, "max_partials": 0,
        "timeouts": {"build_s": 120, "solution_s": 45, "verifier_s": 30, "init_check_s": 10}}
    cfg = construction_config(run)
    assert (cfg["max_environment_repairs"], cfg["max_repair_rounds"], cfg["max_partials"]) == (1, 2, 0)
    assert cfg["timeouts"] == {"build_s": 120, "solution_s": 45, "verifier_s": 30, "init_check_s": 10}


def test_unticking_construct_tasks_turns_auto_construction_off_and_blanks_keep_defaults(client_as, corpus):
    assert start(client_as("reviewer")).status_code == 302
    run = SynthesisRun.objects.get()
    assert run.config["construction"] == {"auto": False}
    cfg = construction_config(run)
    assert cfg["max_repair_rounds"] == DEFAULT_CONSTRUCTION["max_repair_rounds"]
    assert cfg["timeouts"] == DEFAULT_CONSTRUCTION["timeouts"]


@pytest.mark.parametrize("field, value, message", [
    ("max_environment_repairs", "11",
     "construction.max_environment_repairs: must be a whole number of environment repairs from 0 to 10"),
    ("max_repair_rounds", "-1", "construction.max_repair_rounds: must be a whole number of repair rounds from 0 to 20"),
    ("max_partials", "4", "construction.max_partials: must be a whole number of partial solutions from 0 to 3"),
    ("build_timeout_s", "5", "construction.timeouts.build_s: must be a number of seconds from 10 to 3600"),
    ("solution_timeout_s", "0", "construction.timeouts.solution_s: must be a number of seconds from 5 to 3600"),
    ("verifier_timeout_s", "7200", "construction.timeouts.verifier_s: must be a number of seconds from 5 to 3600"),
    ("init_check_timeout_s", "601", "construction.timeouts.init_check_s: must be a number of seconds from 1 to 600"),
])
def test_a_bad_setting_is_reported_on_its_own_field(client_as, corpus, field, value, message):
    response = start(client_as("reviewer"), **{field: value})
    assert response.status_code == 400
    assert f'data-field="{field}">{message}' in response.content.decode()
    assert not SynthesisRun.objects.exists()


def test_a_number_that_is_not_a_number_is_a_field_error_too(client_as, corpus):
    response = start(client_as("reviewer"), max_repair_rounds="five")
    assert response.status_code == 400
    assert 'data-field="max_repair_rounds">Enter a whole number.' in response.content.decode()


@pytest.mark.parametrize("construction, message", [
    ({"max_repairs": 3}, "construction.max_repairs: unknown setting"),
    ({"auto": "yes"}, "construction.auto: expected true or false"),
    ({"max_partials": True}, "construction.max_partials: must be a whole number"),
    ({"timeouts": {"run_s": 5}}, "construction.timeouts.run_s: unknown timeout"),
    ({"timeouts": 30}, "construction.timeouts: expected an object of seconds"),
])
def test_the_api_and_cli_get_the_same_checks(corpus, construction, message):
    with pytest.raises(RunConfigError, match=message.replace(".", r"\.")):
        services.start_run(name="api", enqueue=False, config={"construction": construction})
    assert not SynthesisRun.objects.exists()
