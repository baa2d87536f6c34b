"""A synthesis run's config: its defaults (DEFAULT_CONFIG), the one check of what a run was given
(`validate_config`, used by the run form, the API and the CLI alike), its "llm" section (which
endpoint, never where or with which key: `check_llm_config`) and the "construction" section.

The construction section belongs to the run and is checked here, where runs are configured; task
construction reads it back through `construction_config`, so the later stage depends on this one
and not the reverse.
"""
from __future__ import annotations

from facet_site.lib.llm import LLMConfigError
from facet_site.lib.llm.settings import LLMEndpoint
from skills.models import Category

from . import endpoints
from .models import Strategy

# The paper's budgets (stage 3): three environment repairs, five task repair rounds.
DEFAULT_CONSTRUCTION = {
    "max_environment_repairs": 3,
    "max_repair_rounds": 5,
    "max_partials": 3,
    "trial_runs": None,  # runs of the nop and of the oracle per validation; None: FACET_VALIDATION_TRIAL_RUNS
    "stale_after_minutes": 60,
    # caps on what task.toml asks for; validation uses the smaller
    "timeouts": {"build_s": 600, "solution_s": 300, "verifier_s": 300, "init_check_s": 60},
}

# What a run may set: the range of each number, and what it means to the user.
CONSTRUCTION_RANGES = {
    "max_environment_repairs": (0, 10, "environment repairs"),
    "max_repair_rounds": (0, 20, "repair rounds"),
    "max_partials": (0, 3, "partial solutions"),
    "trial_runs": (1, 5, "runs of the nop and of the oracle trial"),
    "stale_after_minutes": (1, 24 * 60, "minutes"),
}
TIMEOUT_RANGES = {"build_s": (10, 3600), "solution_s": (5, 3600), "verifier_s": (5, 3600), "init_check_s": (1, 600)}


class ConstructionConfigError(ValueError):
    """A bad value in a run's "construction" settings; `field` is its path, e.g. construction.timeouts.build_s."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def check_construction_config(given) -> dict:
    """The run's "construction" section as given, checked: known keys, integers and seconds in range,
    `auto` a boolean. Raises ConstructionConfigError naming the setting."""
    if not isinstance(given, dict):
        raise ConstructionConfigError("construction", "expected an object")
    for key in given:
        if key not in DEFAULT_CONSTRUCTION and key != "auto":
            raise ConstructionConfigError(f"construction.{key}", "unknown setting")
    if "auto" in given and not isinstance(given["auto"], bool):
        raise ConstructionConfigError("construction.auto", "expected true or false")
    for key, (low, high, what) in CONSTRUCTION_RANGES.items():
        value = given.get(key)
        if key in given and (not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high):
            raise ConstructionConfigError(f"construction.{key}", f"must be a whole number of {what} from {low} to {high}")
    timeouts = given.get("timeouts", {})
    if not isinstance(timeouts, dict):
        raise ConstructionConfigError("construction.timeouts", "expected an object of seconds")
    for key, value in timeouts.items():
        if key not in TIMEOUT_RANGES:
            raise ConstructionConfigError(f"construction.timeouts.{key}", "unknown timeout")
        low, high = TIMEOUT_RANGES[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
            raise ConstructionConfigError(f"construction.timeouts.{key}", f"must be a number of seconds from {low} to {high}")
    return given


def construction_config(run) -> dict:
    """The defaults, overridden by a synthesis run's optional "construction" section (None: defaults)."""
    given = ((run.config or {}).get("construction") or {}) if run is not None else {}
    cfg = {**DEFAULT_CONSTRUCTION, **{k: v for k, v in given.items() if k != "timeouts"}}
    cfg["timeouts"] = {**DEFAULT_CONSTRUCTION["timeouts"], **(given.get("timeouts") or {})}
    return cfg


def auto_construction(run) -> bool:
    """Whether a finished run goes on into task construction (unless "construction": {"auto": false})."""
    return ((run.config or {}).get("construction") or {}).get("auto", True)


DEFAULT_CONFIG = {
    "strategy": Strategy.FORWARD.value,
    # llm_classification: the optional first stage, each skill's category from the run's model
    # (scenarios/classifying.py, docs/skills.md); needs an endpoint or a cassette to replay
    "skills": {"categories": [], "source": "", "max_skills": 1000, "llm_classification": False},
    "limits": {
        "max_pairs": 500,
        "max_tokens": 0,  # 0: no token budget
        "hypotheses_per_skill": 3,
        "k": 10,
        "min_similarity": 0.45,
        "max_group_size": 3,
        "judge_min_score": 3,
        "stale_after_minutes": 30,
    },
    # checked by check_llm_config: an endpoint named in settings.FACET_LLM_ENDPOINTS ("" is
    # "default") and the few values a run may choose; empty values keep the endpoint's own.
    # profiles: {"judge": {"endpoint": "strong", "model": "...", "temperature": 0}} for one stage
    "llm": {"endpoint": "", "model": "", "profiles": {}},
    # task construction (stage 3): checked by check_construction_config, defaults in DEFAULT_CONSTRUCTION
    "construction": {},
}


class RunConfigError(ValueError):
    """A bad value in a run's config, its message naming the setting (e.g. limits.k: ...)."""


# What anyone starting a run or a rollout batch may choose in its "llm" section (and per stage).
LLM_RUN_FIELDS = ("endpoint", "model", "temperature", "max_tokens")
# What only the operator may set, from the CLI or the demo (`trusted=True`): where the model is and
# which cassette replays or records it. A key or key file is never taken from a run, not even there.
LLM_OPERATOR_FIELDS = ("provider", "base_url", "cassette", "record")
MAX_STAGE_NAME = 60
MAX_MODEL_NAME = 200


def _text(value, field: str, *, max_length: int) -> str:
    if not isinstance(value, str):
        raise RunConfigError(f"{field}: expected text")
    if "\x00" in value:
        raise RunConfigError(f"{field}: must not contain NUL bytes")
    if len(value) > max_length:
        raise RunConfigError(f"{field}: at most {max_length} characters")
    return value


def _llm_values(given: dict, where: str, *, trusted: bool, allowed: tuple[str, ...]) -> None:
    from django.conf import settings  # the endpoints are the operator's, configured in settings

    for key in given:
        if key in LLM_OPERATOR_FIELDS and not trusted:
            raise RunConfigError(f"{where}{key}: set by the operator, not by a run; choose a configured "
                                 f"endpoint with {where}endpoint")
        if key not in allowed and key not in LLM_OPERATOR_FIELDS:
            raise RunConfigError(f"{where}{key}: unknown setting; a run may set {', '.join(allowed)}")
    name = given.get("endpoint") or ""
    endpoint = endpoints.find(_text(name, f"{where}endpoint", max_length=100))  # the operator's or an admin's
    if endpoint is None and not name:
        endpoint = LLMEndpoint("default", settings.FACET_LLM)
    if endpoint is None:
        raise RunConfigError(f"{where}endpoint: no endpoint named {name!r}; configured: "
                             f"{', '.join(sorted(endpoints.configured()))}")
    model = _text(given.get("model") or "", f"{where}model", max_length=MAX_MODEL_NAME)
    if model and endpoint.models and model not in endpoint.models and not trusted:
        raise RunConfigError(f"{where}model: endpoint {endpoint.name!r} offers {', '.join(endpoint.models)}")
    temperature = given.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not 0 <= temperature <= 2):
        raise RunConfigError(f"{where}temperature: must be a number from 0 to 2")
    cap = endpoint.max_tokens_cap or 1_000_000
    max_tokens = given.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or not 1 <= max_tokens <= cap):
        raise RunConfigError(f"{where}max_tokens: must be a whole number from 1 to {cap}")
    if "provider" in given and given["provider"] not in ("", None, "openai", "replay"):
        raise RunConfigError(f"{where}provider: expected openai or replay")
    for key in ("base_url", "cassette", "record"):
        if given.get(key) is not None:
            _text(given[key], f"{where}{key}", max_length=4096)


def check_llm_config(given, *, trusted: bool = False) -> dict:
    """A run's or rollout batch's "llm" section, checked: a configured endpoint and the values a run
    may choose (LLM_RUN_FIELDS, per stage under "profiles"). Endpoint URLs, keys, cassettes and
    record paths are the operator's: refused, naming the field, unless `trusted` (CLI, demo)."""
    if not isinstance(given, dict):
        raise RunConfigError("llm: expected an object")
    _llm_values({k: v for k, v in given.items() if k != "profiles"}, "llm.", trusted=trusted, allowed=LLM_RUN_FIELDS)
    profiles = given.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise RunConfigError("llm.profiles: expected an object of stage name → settings")
    for stage, profile in profiles.items():
        _text(stage, "llm.profiles", max_length=MAX_STAGE_NAME)
        if not isinstance(profile, dict):
            raise RunConfigError(f"llm.profiles.{stage}: expected an object of settings")
        # a stage may switch endpoint and tune itself, but never point at a URL, key or file
        _llm_values(profile, f"llm.profiles.{stage}.", trusted=False, allowed=LLM_RUN_FIELDS)
    return given


def _whole(value, field: str, low: int, high: int, what: str = "a whole number") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RunConfigError(f"{field}: must be {what} from {low} to {high}")


def _merge(base: dict, given: dict, path: str = "") -> dict:
    out = dict(base)
    for key, value in (given or {}).items():
        where = f"{path}{key}"
        if key not in base:
            raise RunConfigError(f"{where}: unknown setting")
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise RunConfigError(f"{where}: expected an object")
            # the "llm" section is checked by check_llm_config (its message says who may set what),
            # an empty default (construction) is checked by its own function; others take known keys
            if key == "llm":
                out[key] = {**base[key], **value}
            else:
                out[key] = _merge(base[key], value, where + ".") if base[key] else dict(value)
        else:
            out[key] = value
    return out


# Upper bounds keep every number a run stores far inside what the database and the workers handle.
LIMIT_RANGES = {"max_pairs": (1, 1_000_000), "hypotheses_per_skill": (1, 50), "k": (1, 1000),
                "stale_after_minutes": (1, 7 * 24 * 60), "max_tokens": (0, 10**12)}


def _llm_reachable(section: dict) -> bool:
    """Whether the run's calls can be answered: an endpoint URL, or a cassette to replay."""
    from .llm import llm_settings  # at call time: llm reads the operator's endpoints from settings

    try:
        chosen = llm_settings(section)
    except LLMConfigError as exc:
        raise RunConfigError(f"llm: {exc}") from None
    return bool(chosen.cassette_path) if chosen.provider == "replay" else bool(chosen.base_url)


def validate_config(config: dict | None, *, trusted: bool = False) -> dict:
    """The run's config over DEFAULT_CONFIG, checked; RunConfigError names the first bad setting.
    `trusted` (the CLI and the demo, run by the operator) may also set LLM_OPERATOR_FIELDS."""
    if config is not None and not isinstance(config, dict):
        raise RunConfigError("config: expected an object")
    cfg = _merge(DEFAULT_CONFIG, config or {})
    if cfg["strategy"] not in Strategy.values:
        raise RunConfigError(f"strategy: expected one of {', '.join(Strategy.values)}")
    limits = cfg["limits"]
    for name, (low, high) in LIMIT_RANGES.items():
        what = "0 (no budget) or a positive integer" if low == 0 else "a positive integer"
        if isinstance(limits[name], bool) or not isinstance(limits[name], int) or limits[name] < low:
            raise RunConfigError(f"limits.{name}: must be {what}")
        if limits[name] > high:
            raise RunConfigError(f"limits.{name}: must be at most {high}")
    if limits["max_group_size"] not in (2, 3):
        raise RunConfigError("limits.max_group_size: must be 2 or 3")
    if (isinstance(limits["min_similarity"], bool) or not isinstance(limits["min_similarity"], (int, float))
            or not -1 <= limits["min_similarity"] <= 1):
        raise RunConfigError("limits.min_similarity: must be a number between -1 and 1")
    _whole(limits["judge_min_score"], "limits.judge_min_score", 1, 5, "an integer")
    skills = cfg["skills"]
    if isinstance(skills["max_skills"], bool) or not isinstance(skills["max_skills"], int) or skills["max_skills"] < 2:
        raise RunConfigError("skills.max_skills: must be an integer of at least 2")
    if skills["max_skills"] > 10**6:
        raise RunConfigError("skills.max_skills: must be at most 1000000")
    _text(skills["source"] or "", "skills.source", max_length=500)
    if not isinstance(skills["categories"], list) or not all(isinstance(c, str) for c in skills["categories"]):
        raise RunConfigError("skills.categories: expected a list of category slugs")
    for slug in skills["categories"]:
        _text(slug, "skills.categories", max_length=100)
    unknown = set(skills["categories"]) - set(Category.objects.filter(slug__in=skills["categories"]).values_list("slug", flat=True))
    if unknown:
        raise RunConfigError(f"skills.categories: no category with slug {', '.join(sorted(unknown))}")
    check_llm_config(cfg["llm"], trusted=trusted)
    if not isinstance(skills["llm_classification"], bool):
        raise RunConfigError("skills.llm_classification: expected true or false")
    if skills["llm_classification"] and not _llm_reachable(cfg["llm"]):
        raise RunConfigError("skills.llm_classification: no LLM endpoint is configured (FACET_LLM_BASE_URL or "
                             "FACET_LLM_ENDPOINTS) and no cassette replays one")
    try:
        check_construction_config(cfg["construction"])
    except ConstructionConfigError as exc:
        raise RunConfigError(str(exc)) from None
    return cfg
