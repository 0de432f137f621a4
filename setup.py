"""Ships the top-level ``configs/`` inside the package as ``posx/configs``.

``configs/`` stays where users look for it and is the only copy in the repository; setuptools
maps it into the package. That takes a ``package_dir`` entry, which cannot be combined with
``packages.find`` in pyproject.toml, so the package list is made here. Everything else is
declared in pyproject.toml, except the C sources shipped with ``posx.kernels.native``.
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
# Each config group (configs/encoding, configs/hydra/launcher, ...) is a data-only package.
GROUPS = sorted(
    ".".join(p.relative_to(HERE / "configs").parts)
    for p in (HERE / "configs").rglob("*")
    if p.is_dir() and any(p.glob("*.yaml"))
)
CONFIGS = ["posx.configs", *(f"posx.configs.{g}" for g in GROUPS)]

setup(
    packages=[*find_packages(include=["posx", "posx.*"]), *CONFIGS],
    package_dir={"posx.configs": "configs"},
    # the C kernels are built from source on first use (posx/kernels/native/__init__.py)
    package_data={
        **{name: ["*.yaml"] for name in CONFIGS},
        "posx.kernels.native": ["*.c"],
        "posx.ruler": ["words/*.txt"],  # the word lists of RULER's tasks
    },
)
