"""The admins' prompts pages: every prompt with its versions, and one prompt with its template, a
real stored call's messages as sent, and the tokens per stage of that call's chain."""
from django.http import Http404
from django.shortcuts import render

from . import prompt_catalogue as catalogue
from .lib.llm.prompts import PromptError
from .roles import is_admin, require


@require(is_admin)
def prompt_list(request):
    prompts = catalogue.catalogue()
    return render(request, "prompts/list.html", {"prompts": prompts, "families": catalogue.FAMILY_ORDER})


@require(is_admin)
def prompt_detail(request, stage: str):
    info = catalogue.find(stage)
    if info is None:
        raise Http404("No such prompt.")
    version = request.GET.get("version") or None
    if version and version not in info.versions:
        raise Http404("No such version of this prompt.")
    template = None
    if not info.in_code:
        try:
            template = catalogue.template(stage, version)
        except PromptError:
            raise Http404("No such version of this prompt.") from None
    example = request.GET.get("example", "latest")
    try:
        call = catalogue.example_call(stage, example)
    except ValueError:
        raise Http404("No such example.") from None
    if call is None and example != "latest":
        raise Http404("No stored call of this stage has that id.")
    return render(request, "prompts/detail.html", {
        "info": info,
        "template": template,
        "placeholders": sorted(template.placeholders) if template else [],
        "call": call,
        "sent": catalogue.rendered_messages(call) if call else [],  # not "messages": base.html shows those as notices
        "response_tokens": catalogue.approx_tokens(call.response_text or "") if call else 0,
        "tokens": catalogue.tokens_per_stage(subject=call.subject) if call else [],
        "token_method": catalogue.TOKEN_METHOD,
    })
