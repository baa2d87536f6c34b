"""The run form's LLM endpoint: the operator's endpoints offered by name ("default" first), the one
chosen stored in the run's config, an unknown name reported beside the field, and nothing of where
an endpoint is or which key it uses ever on the page (docs/security.md, "LLM endpoints")."""
import json
import re

import pytest
from django.urls import reverse

from facet_site.lib.llm.settings import LLMSettings, endpoints_from_env
from scenarios.models import SynthesisRun

pytestmark = pytest.mark.django_db

DEFAULT_URL, STRONG_URL = "http://default-llm.internal:8000/v1", "https://strong-llm.internal/v1"
DEFAULT_KEY, STRONG_KEY = "sk-default-0123456789abcdef", "sk-strong-fedcba9876543210"


@pytest.fixture
def endpoints(settings):
    default = LLMSettings(base_url=DEFAULT_URL, api_key=DEFAULT_KEY, model="small-model")
    settings.FACET_LLM = default
    settings.FACET_LLM_ENDPOINTS = endpoints_from_env({
        "FACET_LLM_ENDPOINTS": json.dumps({
            "strong": {"base_url": STRONG_URL, "model": "big-a", "models": ["big-a", "big-b"],
                       "api_key_env": "STRONG_LLM_KEY", "max_tokens_cap": 8192},
            "batch": {"base_url": "http://batch-llm.internal/v1", "model": "cheap"}}),
        "STRONG_LLM_KEY": STRONG_KEY,
    }, default)
    return settings.FACET_LLM_ENDPOINTS


def start(client, **fields):
    return client.post(reverse("scenarios:runs"), {"name": "by endpoint", "strategy": "forward", **fields})


def field_errors(html: str, field: str) -> list[str]:
    return re.findall(rf'<div class="error field-error" data-field="{field}">(.*?)</div>', html, re.S)


def test_the_form_offers_the_configured_endpoints_by_name_default_first(client_as, corpus, endpoints):
    html = client_as("reviewer").get(reverse("scenarios:runs")).content.decode()
    select = re.search(r'<select name="endpoint"[^>]*>(.*?)</select>', html, re.S)
    assert select, "the run form has no endpoint selector"
    options = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', select.group(1))
    assert options == [("default", "default"), ("batch", "batch"), ("strong", "strong (big-a, big-b)")]
    assert re.search(r'<option value="default"[^>]*selected', select.group(1)) or "selected" not in select.group(1)
    assert 'for="id_endpoint">LLM endpoint<' in html


def test_nothing_of_an_endpoints_address_or_key_is_on_any_page_a_reviewer_sees(client_as, corpus, endpoints):
    client = client_as("reviewer")
    pages = [client.get(reverse("scenarios:runs")).content.decode()]
    response = start(client, endpoint="strong")
    run = SynthesisRun.objects.get()
    pages += [client.get(response["Location"]).content.decode(),
              client.get(reverse("scenarios:run", args=[run.pk]), HTTP_HX_REQUEST="true").content.decode(),
              start(client, endpoint="nowhere").content.decode()]
    for html in pages:
        for secret in (DEFAULT_URL, STRONG_URL, "batch-llm.internal", DEFAULT_KEY, STRONG_KEY, "STRONG_LLM_KEY"):
            assert secret not in html
        assert "api_key" not in html and "base_url" not in html


def test_the_chosen_endpoint_is_the_runs(client_as, corpus, endpoints):
    response = start(client_as("reviewer"), endpoint="strong", model="big-b")
    assert response.status_code == 302
    run = SynthesisRun.objects.get()
    assert run.config["llm"]["endpoint"] == "strong" and run.config["llm"]["model"] == "big-b"
    from scenarios.llm import llm_settings

    chosen = llm_settings(run.config["llm"])  # what the workers will call
    assert (chosen.base_url, chosen.model, chosen.api_key) == (STRONG_URL, "big-b", STRONG_KEY)


def test_without_a_choice_the_run_uses_the_default_endpoint(client_as, corpus, endpoints):
    assert start(client_as("reviewer")).status_code == 302
    run = SynthesisRun.objects.get()
    assert run.config["llm"]["endpoint"] in ("", "default")
    from scenarios.llm import llm_settings

    assert llm_settings(run.config["llm"]).base_url == DEFAULT_URL


def test_an_unknown_endpoint_is_an_error_beside_the_field(client_as, corpus, endpoints):
    response = start(client_as("reviewer"), endpoint="http://attacker.example/v1")
    assert response.status_code == 400 and not SynthesisRun.objects.exists()
    errors = field_errors(response.content.decode(), "endpoint")
    assert len(errors) == 1 and errors[0].startswith("endpoint: no endpoint named")
    assert "attacker.example" in errors[0]  # the name given, escaped; nothing was contacted


def test_a_model_the_endpoint_does_not_offer_is_an_error_beside_the_model(client_as, corpus, endpoints):
    response = start(client_as("reviewer"), endpoint="strong", model="not-offered")
    assert response.status_code == 400 and not SynthesisRun.objects.exists()
    errors = field_errors(response.content.decode(), "model")
    assert errors and "llm.model: endpoint &#x27;strong&#x27; offers big-a, big-b" in errors[0]


def test_the_estimate_takes_the_chosen_endpoint_too(client_as, corpus, endpoints):
    response = client_as("reviewer").post(reverse("scenarios:runs"), {
        "name": "estimate", "strategy": "forward", "endpoint": "strong", "estimate": "1"})
    html = response.content.decode()
    assert response.status_code == 200 and 'id="run-estimate"' in html and not SynthesisRun.objects.exists()
    assert re.search(r'<option value="strong"[^>]*selected', html)  # the choice survives the round trip


# --- endpoints an admin defines -------------------------------------------------------------------------

ADMIN_URL, ADMIN_KEY, FILE_KEY = "https://team-llm.internal/v1", "sk-team-5555aaaa9999", "sk-file-7777bbbb3333"


@pytest.fixture
def operator_keys(settings, tmp_path):
    """Keys the operator set: one variable (FACET_LLM_KEY_TEAM) and one file under the key folder."""
    folder = tmp_path / "llm-keys"
    folder.mkdir()
    (folder / "lab").write_text(FILE_KEY + "\n")
    (tmp_path / "outside").write_text("not a key of the folder")
    settings.FACET_LLM_KEYS = {"team": ADMIN_KEY}
    settings.FACET_LLM_KEY_DIR = str(folder)
    return folder


def add_endpoint(client, **fields):
    data = {"name": "team", "base_url": ADMIN_URL, "model": "team-a", "offered_models": "team-a, team-b",
            "key_name": "team", "max_tokens_cap": "4096", "timeout_s": "60", "enabled": "on", **fields}
    return client.post(reverse("admin:scenarios_namedendpoint_add"), data)


def test_an_admin_defines_an_endpoint_that_runs_then_choose_by_name(client_as, corpus, endpoints, operator_keys):
    from scenarios.llm import llm_settings
    from scenarios.models import NamedEndpoint

    add_page = client_as("admin").get(reverse("admin:scenarios_namedendpoint_add")).content.decode()
    assert '<option value="team">team</option>' in add_page and '<option value="lab">lab</option>' in add_page
    assert ADMIN_KEY not in add_page and FILE_KEY not in add_page and "outside" not in add_page
    assert add_endpoint(client_as("admin")).status_code == 302
    record = NamedEndpoint.objects.get()
    assert record.key_name == "team" and ADMIN_KEY not in str(NamedEndpoint.objects.values().get())

    client = client_as("reviewer")
    html = client.get(reverse("scenarios:runs")).content.decode()
    assert '<option value="team">team (team-a, team-b)</option>' in html and ADMIN_URL not in html
    assert start(client, endpoint="team", model="team-b").status_code == 302
    run = SynthesisRun.objects.get()
    chosen = llm_settings(run.config["llm"])
    assert (chosen.base_url, chosen.model, chosen.api_key) == (ADMIN_URL, "team-b", ADMIN_KEY)
    refused = start(client, endpoint="team", model="gpt-anything")
    assert "llm.model: endpoint &#x27;team&#x27; offers team-a, team-b" in refused.content.decode()


def test_a_key_from_the_operators_folder_is_read_there_and_nowhere_else(client_as, endpoints, operator_keys):
    from scenarios import endpoints as named

    assert add_endpoint(client_as("admin"), name="lab", key_name="lab").status_code == 302
    lab = named.find("lab").settings
    assert lab.api_key is None and lab.resolve_api_key() == FILE_KEY  # read from the folder when a call is made
    # a name that is not one of the operator's keys is refused: no path is ever typed in
    response = add_endpoint(client_as("admin"), name="sneaky", key_name="../outside")
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert named.find("sneaky") is None


def test_only_admins_define_endpoints_and_settings_names_stay_the_operators(client_as, endpoints, operator_keys):
    from scenarios.models import NamedEndpoint

    assert client_as("reviewer").get(reverse("admin:scenarios_namedendpoint_add")).status_code in (302, 403)
    assert add_endpoint(client_as("reviewer")).status_code in (302, 403)
    assert not NamedEndpoint.objects.exists()
    clash = add_endpoint(client_as("admin"), name="strong")
    assert clash.status_code == 200 and "is an endpoint the operator set in settings" in clash.content.decode()
    bad_url = add_endpoint(client_as("admin"), name="ftp", base_url="ftp://files.internal/v1")
    assert bad_url.status_code == 200 and "an http:// or https:// address" in bad_url.content.decode()
    assert not NamedEndpoint.objects.exists()


def test_a_disabled_endpoint_is_no_longer_offered_or_accepted(client_as, corpus, endpoints, operator_keys):
    from scenarios.models import NamedEndpoint

    assert add_endpoint(client_as("admin"), enabled="").status_code == 302
    assert NamedEndpoint.objects.get().enabled is False
    client = client_as("reviewer")
    assert 'value="team"' not in client.get(reverse("scenarios:runs")).content.decode()
    errors = field_errors(start(client, endpoint="team").content.decode(), "endpoint")
    assert errors and "no endpoint named" in errors[0]
