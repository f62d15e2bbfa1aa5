"""Settings read from the environment and the model list file.

The model list is HolmesGPT's `modelList` format: a YAML mapping of names to litellm settings
(`model`, `api_key`, `api_base`, `temperature`, ...), where `{{ env.VAR }}` is replaced by the
environment variable's value. When no model is configured at all, the built-in demo model (the
scripted model server playing its demo scenario) is used, and callers must say so in output.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ConfigError",
    "DEMO_MODEL_NAME",
    "demo_model",
    "ModelConfig",
    "ModelList",
    "load_model_list",
    "api_bind",
]

DEMO_MODEL_NAME = "lestrade-demo"

_ENV_REF = re.compile(r"\{\{\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class ConfigError(ValueError):
    """The configuration is invalid; the message says where and why."""


@dataclass(frozen=True)
class ModelConfig:
    name: str
    settings: dict[str, Any]  # litellm keyword arguments: model, api_key, api_base, ...
    is_demo: bool = False

    @property
    def litellm_model(self) -> str:
        return str(self.settings["model"])


DEFAULT_ALIAS = "default"
"""What a harness request names to get the configured default model (the agent-harness API's
examples send `"model": "default"`)."""


@dataclass(frozen=True)
class ModelList:
    models: dict[str, ModelConfig] = field(default_factory=dict)
    default_name: str | None = None

    def get(self, name: str | None) -> ModelConfig:
        """The named model, or the default one when name is empty."""
        key = name or self.default_name
        if key is None or key not in self.models:
            known = ", ".join(sorted(self.models)) or "none"
            raise ConfigError(f"unknown model {name!r}; configured models: {known}")
        return self.models[key]

    def allowed_ids(self) -> list[str]:
        """What a harness request may name as its model: the entries' names and their
        `provider/model` ids (litellm's `model`), sorted (and `default`, see `resolve`)."""
        return sorted(
            {*self.models, *(str(m.settings.get("model")) for m in self.models.values() if m.settings.get("model"))}
        )

    def resolve(self, name_or_id: str | None) -> ModelConfig:
        """A model by entry name, or by its `provider/model` id (the first entry with it);
        the default when empty or `default` (unless an entry has that name). Anything else
        is not allowed (ConfigError lists what is)."""
        if not name_or_id or name_or_id in self.models:
            return self.get(name_or_id)
        if name_or_id == DEFAULT_ALIAS:
            if self.default_name is None:
                raise ConfigError(
                    f"model {DEFAULT_ALIAS!r}: there is no default model; name one of "
                    f"{', '.join(self.allowed_ids()) or 'none'}"
                )
            return self.get(None)
        for model in self.models.values():
            if model.settings.get("model") == name_or_id:
                return model
        allowed = ", ".join(self.allowed_ids()) or "none"
        also = f" (or {DEFAULT_ALIAS}: {self.default_name})" if self.default_name else ""
        raise ConfigError(f"model {name_or_id!r} is not allowed; allowed: {allowed}{also}")


def _substitute(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _ENV_REF.sub(lambda m: env.get(m.group(1), ""), value)
    if isinstance(value, dict):
        return {k: _substitute(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, env) for v in value]
    return value


def demo_model(api_base: str) -> ModelConfig:
    """The built-in demo model: the scripted model server's demo scenario."""
    return ModelConfig(
        name=DEMO_MODEL_NAME,
        settings={"model": "openai/demo", "api_base": api_base, "api_key": "demo"},
        is_demo=True,
    )


def load_model_list(
    path: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    demo_api_base: str | None = None,
) -> ModelList:
    """Reads `LESTRADE_MODEL_LIST` (or `path`); falls back to the demo model when none is set."""
    env = dict(os.environ if env is None else env)
    path = path or env.get("LESTRADE_MODEL_LIST")
    if not path:
        base = demo_api_base or env.get("LESTRADE_DEMO_MODEL_URL", "http://127.0.0.1:8765/v1")
        demo = demo_model(base)
        return ModelList({demo.name: demo}, demo.name)
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read model list {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"model list {path} must be a mapping of name to settings")
    models: dict[str, ModelConfig] = {}
    for name, settings in raw.items():
        if not isinstance(settings, dict) or "model" not in settings:
            raise ConfigError(f"model list {path}: entry {name!r} needs a 'model' setting")
        models[str(name)] = ModelConfig(str(name), _substitute(settings, env))
    default = env.get("LESTRADE_DEFAULT_MODEL") or next(iter(models), None)
    if default is not None and default not in models:
        raise ConfigError(f"LESTRADE_DEFAULT_MODEL={default!r} is not in the model list {path}")
    return ModelList(models, default)


def api_bind(env: dict[str, str] | None = None, in_cluster: bool = False) -> tuple[str, int]:
    """(host, port) the API listens on: 127.0.0.1:8080 locally, 0.0.0.0:8080 in the chart."""
    env = dict(os.environ if env is None else env)
    host = env.get("LESTRADE_API_HOST") or ("0.0.0.0" if in_cluster else "127.0.0.1")
    return host, int(env.get("LESTRADE_API_PORT", "8080"))
