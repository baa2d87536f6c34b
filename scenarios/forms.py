"""The "Start a run" form and the one place a run's config is assembled from user input.

The page, the API and the CLI all merge what the user gave over run_config.DEFAULT_CONFIG here, and
leave every check of the values to services.start_run, so the three report the same errors.
"""
import copy

from django import forms

from skills.models import Category

from . import endpoints
from .models import Strategy
from .run_config import DEFAULT_CONFIG, DEFAULT_CONSTRUCTION


def build_config(overrides: dict) -> dict:
    """DEFAULT_CONFIG with `overrides` merged in section by section (None means "not given")."""
    config = copy.deepcopy(DEFAULT_CONFIG)
    _merge(config, overrides)
    return config


def _merge(target: dict, overrides: dict) -> None:
    for key, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def config_error_field(exc: Exception) -> tuple[str, str]:
    """'limits.max_pairs: must be a positive integer' -> ('max_pairs', 'must be a positive integer').
    The last segment of the path names the form field, so the message lands beside its input."""
    text = str(exc)
    path = getattr(exc, "field", None)
    if not path and ": " in text:
        path, _ = text.split(": ", 1)
    field = (path or "").rsplit(".", 1)[-1]
    return FIELD_ALIASES.get(field, field), text


# "skills: fewer than two accepted skills match" is about the selection, which the categories make;
# construction settings are named by their config path (construction.timeouts.build_s)
FIELD_ALIASES = {"skills": "categories", "auto": "auto_construct", "build_s": "build_timeout_s",
                 "solution_s": "solution_timeout_s", "verifier_s": "verifier_timeout_s",
                 "init_check_s": "init_check_timeout_s"}

# form field -> key of the run's "construction" section (timeouts in its "timeouts" object)
CONSTRUCTION_FIELDS = {"max_environment_repairs": "max_environment_repairs", "max_repair_rounds": "max_repair_rounds",
                       "max_partials": "max_partials"}
TIMEOUT_FIELDS = {"build_timeout_s": "build_s", "solution_timeout_s": "solution_s",
                  "verifier_timeout_s": "verifier_s", "init_check_timeout_s": "init_check_s"}


def category_choices() -> list[tuple[str, str]]:
    """Each family followed by its fine-grained categories, whatever order the database sorts NULLs in."""
    families = Category.objects.filter(parent=None).prefetch_related("children").order_by("position")
    out = []
    for family in families:
        out.append((family.slug, family.name))
        out.extend((c.slug, f"{family.name} › {c.name}") for c in sorted(family.children.all(), key=lambda c: c.position))
    return out


def endpoint_choices() -> list[tuple[str, str]]:
    """The configured endpoints by name, "default" (the FACET_LLM_* variables) first, each with the
    models a run may pick there: names only, never where the endpoint is or how it is reached."""
    configured = endpoints.configured()  # the operator's (settings) and those admins defined
    choices = []
    for name in sorted(configured, key=lambda n: (n != "default", n)):
        models = configured[name].models
        choices.append((name, f"{name} ({', '.join(models)})" if models else name))
    return choices


class StartRunForm(forms.Form):
    name = forms.CharField(max_length=200)
    strategy = forms.ChoiceField(choices=Strategy.choices, initial=Strategy.FORWARD)
    categories = forms.MultipleChoiceField(
        required=False, widget=forms.SelectMultiple(attrs={"size": 10}), help_text="Skills in any of these categories (a family includes its categories). None: all.")
    # Numbers are only parsed here; their limits are start_run's to enforce.
    max_skills = forms.IntegerField(required=False)
    max_pairs = forms.IntegerField(required=False)
    max_tokens = forms.IntegerField(required=False)
    # choices: the configured endpoints' names (scenarios/endpoints.py), "default" first; never a URL or key
    endpoint = forms.ChoiceField(
        required=False, label="LLM endpoint", error_messages={"invalid_choice": "endpoint: no endpoint named “%(value)s” "
                                                              "is configured; choose one of the list"},
        help_text="A model endpoint the operator or an admin configured. Its address and key stay on the server.")
    model = forms.CharField(max_length=200, required=False)
    llm_classification = forms.BooleanField(
        required=False, initial=False, label="Classify skills with the LLM first",
        help_text="One call per skill before the hypotheses: the model picks each skill's category, with the "
                  "trained classifier's answer as a hint. A reviewer's override is kept.")
    # Task construction (stage 3); the strategy above orders its artifacts.
    auto_construct = forms.BooleanField(
        required=False, initial=True, label="Construct tasks",
        help_text="When the run finishes on the workers, build and validate a task from each consistent scenario.")
    max_environment_repairs = forms.IntegerField(
        required=False, label="Max environment repairs", help_text="Rebuilds after a failed build, 0–10; then the task is discarded.")
    max_repair_rounds = forms.IntegerField(
        required=False, label="Max repair rounds", help_text="Targeted repairs after a failed validation, 0–20.")
    max_partials = forms.IntegerField(
        required=False, label="Partial solutions", help_text="Truncated solutions that must not pass the verifier, 0–3.")
    build_timeout_s = forms.IntegerField(required=False, label="Build timeout (s)", help_text="10–3600 seconds.")
    solution_timeout_s = forms.IntegerField(required=False, label="Solution timeout (s)", help_text="5–3600 seconds.")
    verifier_timeout_s = forms.IntegerField(required=False, label="Verifier timeout (s)", help_text="5–3600 seconds.")
    init_check_timeout_s = forms.IntegerField(required=False, label="Init check timeout (s)", help_text="1–600 seconds.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["categories"].choices = category_choices()
        self.fields["endpoint"].choices = endpoint_choices()
        defaults = DEFAULT_CONFIG
        for section, name in (("skills", "max_skills"), ("limits", "max_pairs"), ("limits", "max_tokens")):
            self.fields[name].initial = (defaults.get(section) or {}).get(name)
        self.fields["model"].initial = (defaults.get("llm") or {}).get("model", "")
        self.fields["strategy"].initial = defaults.get("strategy", Strategy.FORWARD)
        for name, key in CONSTRUCTION_FIELDS.items():
            self.fields[name].initial = DEFAULT_CONSTRUCTION[key]
        for name, key in TIMEOUT_FIELDS.items():
            self.fields[name].initial = DEFAULT_CONSTRUCTION["timeouts"][key]

    def config(self) -> dict:
        d = self.cleaned_data
        construction = {"auto": bool(d["auto_construct"])}
        construction.update({key: d[name] for name, key in CONSTRUCTION_FIELDS.items() if d[name] is not None})
        timeouts = {key: d[name] for name, key in TIMEOUT_FIELDS.items() if d[name] is not None}
        if timeouts:
            construction["timeouts"] = timeouts
        return build_config({
            "strategy": d["strategy"],
            "skills": {"categories": list(d["categories"]), "max_skills": d["max_skills"],
                       "llm_classification": bool(d["llm_classification"])},
            "limits": {"max_pairs": d["max_pairs"], "max_tokens": d["max_tokens"]},
            "llm": {"endpoint": d["endpoint"] or None, "model": d["model"] or None},
            "construction": construction,
        })

    def add_config_error(self, exc: Exception) -> None:
        field, message = config_error_field(exc)
        self.add_error(field if field in self.fields else None, message)
