"""Where and how to call the model: one frozen `LLMSettings`, built from the FACET_LLM_* values
`facet_site/settings.py` passes in, with overrides laid over it by one function (`overlaid`): a
run's or batch's own "llm" section, and per-stage profiles (a cheap model for one stage, a longer
timeout for another)."""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import LLMConfigError

PROVIDERS = ("openai", "replay")

# Prices are USD per million tokens, (input, output).
PriceTable = Mapping[str, tuple[float, float]]


@dataclass(frozen=True)
class LLMSettings:
    base_url: str = ""
    # repr=False: settings end up in logs and tracebacks, the key must not.
    api_key: str | None = field(default=None, repr=False)
    api_key_file: str | None = None
    model: str = ""
    temperature: float | None = 0.0
    max_tokens: int | None = 4096
    timeout: float = 120.0
    max_retries: int = 3
    provider: str = "openai"
    record_path: str | None = None
    cassette_path: str | None = None
    prices: PriceTable = field(default_factory=dict)
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    # A server asking us to wait longer than this is better left to the job queue's own schedule.
    max_retry_after: float = 120.0

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise LLMConfigError(f"unknown LLM provider {self.provider!r}; expected one of {PROVIDERS}")
        if self.max_retries < 0:
            raise LLMConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        object.__setattr__(self, "prices", _normalize_prices(self.prices))

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> LLMSettings:
        """Settings from FACET_LLM_* variables in `environ`; blank ones keep the defaults.
        `facet_site/settings.py` is the one caller (it passes os.environ once, at start-up)."""
        env = environ
        kwargs: dict[str, Any] = {}
        for var, name in _ENV_FIELDS.items():
            raw = env.get(var)
            if raw is None or raw.strip() == "":
                continue
            if name == "prices":
                try:
                    kwargs[name] = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise LLMConfigError(f"{var} is not valid JSON: {exc}") from None
            else:
                kwargs[name] = _coerce(name, raw.strip(), source=var)
        return cls(**kwargs)

    def overlaid(self, overrides: Mapping[str, Any] | None, *, source: str) -> LLMSettings:
        """These settings with `overrides` (field name -> value) laid over them; the one way settings
        are narrowed, for a run's or batch's "llm" section and for a stage's profile alike.
        Numbers may come as strings; "none"/"" for a nullable field means "do not send it"."""
        if not overrides:
            return self
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise LLMConfigError(f"{source} sets unknown field(s): {', '.join(unknown)}")
        coerced = {k: _coerce(k, v, source=source) for k, v in overrides.items()}
        return dataclasses.replace(self, **coerced)

    def for_stage(self, stage: str, profiles: Mapping[str, Mapping[str, Any]] | None) -> LLMSettings:
        """These settings with the stage's profile laid over them; stages without one are unchanged."""
        return self.overlaid((profiles or {}).get(stage), source=f"LLM profile for stage {stage!r}")

    # -- derived values -----------------------------------------------------------------------

    def resolve_api_key(self) -> str | None:
        if self.api_key:
            return self.api_key
        if self.api_key_file:
            path = Path(self.api_key_file).expanduser()
            try:
                key = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise LLMConfigError(f"cannot read LLM API key file {str(path)!r}: {exc.strerror}") from None
            if not key:
                raise LLMConfigError(f"LLM API key file {str(path)!r} is empty")
            return key
        return None

    def price_for(self, model: str) -> tuple[float, float] | None:
        return self.prices.get(model)

    def estimate_cost(self, model: str, tokens_in: int | None, tokens_out: int | None) -> float | None:
        price = self.price_for(model)
        if price is None or tokens_in is None or tokens_out is None:
            return None
        return (tokens_in * price[0] + tokens_out * price[1]) / 1_000_000


@dataclass(frozen=True)
class LLMEndpoint:
    """A named model endpoint the operator configured: its settings (URL, key, provider, cassette)
    never come from a run; a run picks the endpoint by name and may choose among `models`
    (empty: any model name) and ask for at most `max_tokens_cap` tokens per answer."""

    name: str
    settings: LLMSettings
    models: tuple[str, ...] = ()
    max_tokens_cap: int | None = None


# What an entry of FACET_LLM_ENDPOINTS may set besides LLMSettings' own fields (the key itself is
# never written in the JSON: `api_key_env` names the variable holding it, or `api_key_file` a file).
_ENDPOINT_EXTRA = {"models", "max_tokens_cap", "api_key_env"}


def endpoints_from_env(environ: Mapping[str, str], default: LLMSettings) -> dict[str, LLMEndpoint]:
    """The operator's named endpoints: "default" is `default` (the FACET_LLM_* variables), the
    others come from FACET_LLM_ENDPOINTS, a JSON object name -> {base_url, model, models,
    api_key_env | api_key_file, provider, timeout, max_tokens, max_tokens_cap, prices, ...}.
    Named endpoints do not inherit the default's key, so no key is ever sent to another URL."""
    endpoints = {"default": LLMEndpoint("default", default)}
    raw = (environ.get("FACET_LLM_ENDPOINTS") or "").strip()
    if not raw:
        return endpoints
    try:
        given = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise LLMConfigError(f"FACET_LLM_ENDPOINTS is not valid JSON: {exc}") from None
    if not isinstance(given, dict):
        raise LLMConfigError("FACET_LLM_ENDPOINTS: expected a JSON object of endpoint name -> settings")
    known = {f.name for f in dataclasses.fields(LLMSettings)} - {"api_key"}
    for name, spec in given.items():
        where = f"FACET_LLM_ENDPOINTS.{name}"
        if not isinstance(spec, dict):
            raise LLMConfigError(f"{where}: expected an object of settings")
        unknown = sorted(set(spec) - known - _ENDPOINT_EXTRA)
        if unknown:
            raise LLMConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
        fields = {k: v for k, v in spec.items() if k not in _ENDPOINT_EXTRA}
        if spec.get("api_key_env"):
            fields["api_key"] = environ.get(spec["api_key_env"]) or None
        models = spec.get("models") or []
        if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
            raise LLMConfigError(f"{where}.models: expected a list of model names")
        cap = spec.get("max_tokens_cap")
        if cap is not None and (not isinstance(cap, int) or cap < 1):
            raise LLMConfigError(f"{where}.max_tokens_cap: expected a positive integer")
        endpoints[name] = LLMEndpoint(name, LLMSettings().overlaid(fields, source=where), tuple(models), cap)
    return endpoints


_ENV_FIELDS = {
    "FACET_LLM_BASE_URL": "base_url",
    "FACET_LLM_API_KEY": "api_key",
    "FACET_LLM_API_KEY_FILE": "api_key_file",
    "FACET_LLM_MODEL": "model",
    "FACET_LLM_TEMPERATURE": "temperature",
    "FACET_LLM_MAX_TOKENS": "max_tokens",
    "FACET_LLM_TIMEOUT": "timeout",
    "FACET_LLM_MAX_RETRIES": "max_retries",
    "FACET_LLM_PROVIDER": "provider",
    "FACET_LLM_CASSETTE": "cassette_path",
    "FACET_LLM_RECORD": "record_path",
    "FACET_LLM_PRICES": "prices",
}

_FLOAT_FIELDS = {"temperature", "timeout", "backoff_base", "backoff_max", "max_retry_after"}
_INT_FIELDS = {"max_tokens", "max_retries"}
_NULLABLE = {"temperature", "max_tokens", "api_key", "api_key_file", "record_path", "cassette_path"}


def _coerce(name: str, value: Any, *, source: str) -> Any:
    # Profiles come from JSON/YAML or env strings; "none"/"" means "do not send this parameter".
    if isinstance(value, str) and name in _NULLABLE and value.strip().lower() in ("", "none", "null"):
        return None
    if value is None:
        return None
    if isinstance(value, os.PathLike):  # a cassette or record path given as a Path
        return os.fspath(value)
    try:
        if name in _FLOAT_FIELDS:
            return float(value)
        if name in _INT_FIELDS:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
    except (TypeError, ValueError):
        raise LLMConfigError(f"{source}: {name} must be a number, got {value!r}") from None
    return value


def _normalize_prices(prices: Any) -> dict[str, tuple[float, float]]:
    if not isinstance(prices, Mapping):
        raise LLMConfigError(f"prices must map model -> [usd_per_1M_in, usd_per_1M_out], got {type(prices).__name__}")
    out: dict[str, tuple[float, float]] = {}
    for model, pair in prices.items():
        try:
            usd_in, usd_out = pair
            out[str(model)] = (float(usd_in), float(usd_out))
        except (TypeError, ValueError):
            raise LLMConfigError(
                f"price for model {model!r} must be [usd_per_1M_in, usd_per_1M_out], got {pair!r}"
            ) from None
    return out
