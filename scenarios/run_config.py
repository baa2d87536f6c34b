"""A synthesis run's config: its defaults (DEFAULT_CONFIG), the one check of what a run was given
(`validate_config`, used by the run form, the API and the CLI alike) and the "construction" section.

The construction section belongs to the run and is checked here, where runs are configured; task
construction reads it back through `construction_config`, so the later stage depends on this one
and not the reverse.
"""
from __future__ import annotations

from skills.models import Category

from .models import Strategy

# The paper's budgets (stage 3): three environment repairs, five task repair rounds.
DEFAULT_CONSTRUCTION = {
    "max_environment_repairs": 3,
    "max_repair_rounds": 5,
    "max_partials": 3,
    "stale_after_minutes": 60,
    # caps on what task.toml asks for; validation uses the smaller
    "timeouts": {"build_s": 600, "solution_s": 300, "verifier_s": 300, "init_check_s": 60},
}

# What a run may set: the range of each number, and what it means to the user.
CONSTRUCTION_RANGES = {
    "max_environment_repairs": (0, 10, "environment repairs"),
    "max_repair_rounds": (0, 20, "repair rounds"),
    "max_partials": (0, 3, "partial solutions"),
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
    "skills": {"categories": [], "source": "", "max_skills": 1000},
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
    # empty values fall back to settings.FACET_LLM (the FACET_LLM_* environment variables)
    # profiles: {"judge": {"model": "...", "temperature": 0}} overrides settings for one stage
    "llm": {"model": "", "provider": "", "cassette": "", "base_url": "", "record": "", "profiles": {}},
    # task construction (stage 3): checked by check_construction_config, defaults in DEFAULT_CONSTRUCTION
    "construction": {},
}


class RunConfigError(ValueError):
    """A bad value in a run's config, its message naming the setting (e.g. limits.k: ...)."""


def _merge(base: dict, given: dict, path: str = "") -> dict:
    out = dict(base)
    for key, value in (given or {}).items():
        where = f"{path}{key}"
        if key not in base:
            raise RunConfigError(f"{where}: unknown setting")
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise RunConfigError(f"{where}: expected an object")
            # an empty default (llm.profiles) is a free-form map; others only take known keys
            out[key] = _merge(base[key], value, where + ".") if base[key] else dict(value)
        else:
            out[key] = value
    return out


def validate_config(config: dict | None) -> dict:
    cfg = _merge(DEFAULT_CONFIG, config or {})
    if cfg["strategy"] not in Strategy.values:
        raise RunConfigError(f"strategy: expected one of {', '.join(Strategy.values)}, got {cfg['strategy']!r}")
    limits = cfg["limits"]
    for name in ("max_pairs", "hypotheses_per_skill", "k", "stale_after_minutes"):
        if not isinstance(limits[name], int) or isinstance(limits[name], bool) or limits[name] < 1:
            raise RunConfigError(f"limits.{name}: must be a positive integer")
    if not isinstance(limits["max_tokens"], int) or limits["max_tokens"] < 0:
        raise RunConfigError("limits.max_tokens: must be 0 (no budget) or a positive integer")
    if limits["max_group_size"] not in (2, 3):
        raise RunConfigError("limits.max_group_size: must be 2 or 3")
    if not isinstance(limits["min_similarity"], (int, float)) or not -1 <= limits["min_similarity"] <= 1:
        raise RunConfigError("limits.min_similarity: must be a number between -1 and 1")
    if not isinstance(limits["judge_min_score"], int) or not 1 <= limits["judge_min_score"] <= 5:
        raise RunConfigError("limits.judge_min_score: must be an integer from 1 to 5")
    skills = cfg["skills"]
    if not isinstance(skills["max_skills"], int) or skills["max_skills"] < 2:
        raise RunConfigError("skills.max_skills: must be an integer of at least 2")
    if not isinstance(skills["categories"], list):
        raise RunConfigError("skills.categories: expected a list of category slugs")
    unknown = set(skills["categories"]) - set(Category.objects.filter(slug__in=skills["categories"]).values_list("slug", flat=True))
    if unknown:
        raise RunConfigError(f"skills.categories: no category with slug {', '.join(sorted(unknown))}")
    if not isinstance(cfg["llm"]["profiles"], dict):
        raise RunConfigError("llm.profiles: expected an object of stage name → settings")
    if cfg["llm"]["provider"] not in ("", "openai", "replay"):
        raise RunConfigError("llm.provider: expected openai or replay")
    try:
        check_construction_config(cfg["construction"])
    except ConstructionConfigError as exc:
        raise RunConfigError(str(exc)) from None
    return cfg
