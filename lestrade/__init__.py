"""Lestrade: Kubernetes-native AI troubleshooting.

Importing any part of Lestrade makes litellm and tiktoken work offline: litellm must use the
cost map it ships instead of fetching one, and tiktoken must read the encodings litellm bundles;
and it keeps litellm from loading a `.env` file into the environment.
"""

import os as _os

_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# litellm in its default DEV mode loads a `.env` file at import — found from the working folder
# or walking up from its own install folder — into the environment: model keys, proxies and
# base URLs no setting of ours names. Lestrade's settings come from its own environment only.
_os.environ.setdefault("LITELLM_MODE", "PRODUCTION")


def _bundled_tiktoken_dir() -> str | None:
    from importlib.util import find_spec

    spec = find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = _os.path.join(next(iter(spec.submodule_search_locations)), "litellm_core_utils", "tokenizers")
    return folder if _os.path.isdir(folder) else None


if "TIKTOKEN_CACHE_DIR" not in _os.environ:
    _folder = _bundled_tiktoken_dir()
    if _folder:
        _os.environ["TIKTOKEN_CACHE_DIR"] = _folder

__version__ = "0.1.0"
