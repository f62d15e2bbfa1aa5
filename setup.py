"""Maps the top-level folders to import packages that do not shadow the standard library.

`operator/` is importable as `lestrade.operator` and `api/` as `lestrade.api`; everything else
lives under `lestrade/`. pyproject.toml holds the metadata; only this mapping needs code.
"""

from setuptools import find_packages, setup

ROOTS = {"lestrade": "lestrade", "lestrade.operator": "operator", "lestrade.api": "api"}

packages: list[str] = []
for package, folder in ROOTS.items():
    packages.append(package)
    packages += [f"{package}.{sub}" for sub in find_packages(folder)]

setup(
    packages=packages,
    package_dir=ROOTS,
    package_data={"": ["*.yaml", "*.md", "*.jinja2", "*.txt", "py.typed"], "lestrade.api": ["console/*"]},
)
