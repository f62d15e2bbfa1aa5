"""Built-in runbooks shipped as package data (markdown, one file per runbook).

A package (not a plain folder) so setuptools ships the `*.md` files with the wheel and
`importlib.resources` finds them wherever Lestrade is installed.
"""

__all__: list[str] = []
