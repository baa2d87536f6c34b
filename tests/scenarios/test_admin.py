"""Every scenarios model is in the Django admin; the LLM call log can be read, not rewritten."""
import pytest
from django.urls import reverse

from scenarios.models import LLMCall

pytestmark = pytest.mark.django_db

MODELS = ["synthesisrun", "runskill", "scenariohypothesis", "candidatepair", "judgement", "scenario", "llmcall", "llmcacheentry"]


@pytest.mark.parametrize("model", MODELS)
def test_each_model_has_a_changelist(client_as, repo, model):
    assert client_as("admin").get(reverse(f"admin:scenarios_{model}_changelist")).status_code == 200


def test_records_open_in_the_admin(client_as, repo):
    c = client_as("admin")
    for model, obj in (("synthesisrun", repo.run), ("candidatepair", repo.accepted), ("scenario", repo.scenario)):
        assert c.get(reverse(f"admin:scenarios_{model}_change", args=[obj.pk])).status_code == 200


def test_llm_calls_are_read_only_in_the_admin(client_as, repo):
    c = client_as("admin")
    call = LLMCall.objects.filter(run=repo.run).first()
    assert c.get(reverse("admin:scenarios_llmcall_add")).status_code == 403
    page = c.get(reverse("admin:scenarios_llmcall_change", args=[call.pk]))
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()


def test_the_admin_is_for_admins_only(client_as, repo):
    response = client_as("reviewer").get(reverse("admin:scenarios_synthesisrun_changelist"))
    assert response.status_code == 302
