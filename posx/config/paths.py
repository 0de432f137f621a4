"""Where configs come from: posx's own ``configs/`` plus the user's config directories.

The built-in directory is ``posx/configs`` in an installed wheel (``setup.py`` maps the top-level
``configs/`` there) and the top-level ``configs/`` in a source checkout. A user's directories
(``posx --config-dir DIR``, ``POSX_CONFIG_PATH=DIR1:DIR2``) hold ``encoding/``, ``task/``,
``model/``, ``experiment/``, ``positions/``... yamls that are *added* beside the built-in ones,
through Hydra's ``hydra.searchpath``; they never replace a built-in option.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from posx.errors import ConfigError


def _builtin_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # posx/
    installed = package / "configs"  # a wheel (setup.py maps configs/ to posx/configs)
    return installed if (installed / "config.yaml").is_file() else package.parent / "configs"


CONFIG_DIR = _builtin_dir()
GROUPS = (
    "model", "encoding", "task", "train", "eval", "positions", "logger", "experiment", "extension"
)  # fmt: skip
PATH_ENV = "POSX_CONFIG_PATH"  # several directories, separated by os.pathsep
DIR_ENV = "POSX_CONFIG_DIR"  # older name for one directory; added like PATH_ENV's
FILE_SCHEME = "file://"


def _yamls(root: Path) -> Iterator[tuple[str, str, Path]]:
    """``(group, name, path)`` of every option below ``root`` (``hydra/launcher`` is a group)."""
    for path in sorted(root.rglob("*.yaml")):
        group = "/".join(path.parent.relative_to(root).parts)
        if group:  # yamls at the top (config.yaml) are not options of a group
            yield group, path.stem, path


def _check_dir(entry: str | Path, source: str) -> Path:
    path = Path(entry).expanduser().resolve()
    if not path.is_dir():
        raise ConfigError(f"config dir {entry} (from {source}) is not a directory")
    groups = {p.name for p in path.iterdir() if p.is_dir()}
    if not groups & {*GROUPS, "hydra"}:
        raise ConfigError(
            f"config dir {entry} (from {source}) has none of the group directories "
            f"{', '.join(GROUPS)}; give the directory that holds them (e.g. DIR with "
            "DIR/encoding/NAME.yaml)"
        )
    return path


def _check_names(dirs: Sequence[Path]) -> None:
    """A user option named like a built-in one would be shadowed by it without a word."""
    builtin = {(g, n) for g, n, _ in _yamls(CONFIG_DIR)}
    for d in dirs:
        for group, name, path in _yamls(d):
            if (group, name) in builtin:
                raise ConfigError(
                    f"{path} has the name of a built-in {group} option; rename it "
                    f"(user configs are added beside posx's own, they cannot replace them)"
                )


def user_config_dirs(given: Sequence[str | Path] = (), env: bool = True) -> list[Path]:
    """The user's config directories in search order: ``given`` (``--config-dir``), then
    (with ``env``) ``POSX_CONFIG_PATH`` and ``POSX_CONFIG_DIR``. An option found in two of them
    is taken from the first, as ``PATH`` does.

    Raises:
        ConfigError: An entry is not a directory of config groups, or one of its options has
            the name of a built-in option.
    """
    entries: list[tuple[str | Path, str]] = [(g, "--config-dir") for g in given]
    for var in (PATH_ENV, DIR_ENV) if env else ():
        entries += [(e, var) for e in os.environ.get(var, "").split(os.pathsep) if e.strip()]
    dirs: list[Path] = []
    for entry, source in entries:
        path = _check_dir(entry, source)
        if path not in dirs and path != CONFIG_DIR:
            dirs.append(path)
    _check_names(dirs)
    return dirs


def searchpath_override(dirs: Sequence[Path]) -> list[str]:
    """``["hydra.searchpath=['file:///DIR1','file:///DIR2']"]``, or ``[]`` without dirs: Hydra
    searches these after the built-in configs."""
    if not dirs:
        return []
    quoted = [
        "'" + (FILE_SCHEME + str(d)).replace("\\", "\\\\").replace("'", "\\'") + "'" for d in dirs
    ]
    return [f"hydra.searchpath=[{','.join(quoted)}]"]


def dirs_of_searchpath(entries: Sequence[Any] | None) -> list[Path]:
    """The directories of a ``hydra.searchpath`` value (``file://DIR`` or plain paths).

    Raises:
        ConfigError: An entry names a package (``pkg://``) or another scheme.
    """
    dirs = []
    for entry in entries or []:
        text = str(entry)
        if text.startswith(FILE_SCHEME):
            text = text[len(FILE_SCHEME) :]
        elif "://" in text:
            raise ConfigError(
                f"hydra.searchpath entry {text!r}: only directories (file://DIR) are supported; "
                "add them with posx --config-dir DIR"
            )
        dirs.append(Path(text))
    return dirs


def options(group: str, dirs: Sequence[Path] = ()) -> dict[str, Path]:
    """A group's options, name -> yaml: the built-in ones, then each user dir's new ones."""
    found: dict[str, Path] = {}
    for root in (CONFIG_DIR, *dirs):
        for path in sorted((root / group).glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def option_target(group: str, name: str, dirs: Sequence[Path] = ()) -> str | None:
    """The ``_target_`` an option's yaml sets (``None``: none, or no such option)."""
    path = options(group, dirs).get(name)
    if path is None:
        return None
    node = _load(path)
    target = node.get("_target_") if isinstance(node, dict) else None
    return target if isinstance(target, str) else None


def _load(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"cannot read config {path}: {first}") from err


def _targets(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "_target_" and isinstance(value, str):
                yield value
            else:
                yield from _targets(value)
    elif isinstance(node, list):
        for value in node:
            yield from _targets(value)


def user_config_targets(dirs: Sequence[Path] | None = None) -> set[str]:
    """Every ``_target_`` named in a yaml on the user's config path (default: from the
    environment): the classes the user declared by writing them into their own configs."""
    found: set[str] = set()
    for root in user_config_dirs() if dirs is None else dirs:
        for _, _, path in _yamls(root):
            found.update(_targets(_load(path)))
    return found


def choices(group: str, dirs: Sequence[Path] | None = None) -> list[str]:
    """Option names of a config group: the yaml files in ``configs/<group>/`` and in the user's
    config dirs (default: from ``POSX_CONFIG_PATH``)."""
    return sorted(options(group, user_config_dirs() if dirs is None else dirs))


def option_comment(group: str, name: str, dirs: Sequence[Path] | None = None) -> list[str]:
    """The option's yaml's leading ``#`` comment, line by line, without the ``# `` (what
    ``posx list GROUP NAME`` shows: its paragraphs and lists as written)."""
    path = options(group, user_config_dirs() if dirs is None else dirs)[name]
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            text = line[1:]
            lines.append((text[1:] if text.startswith(" ") else text).rstrip())
    return lines


def describe_option(group: str, name: str, dirs: Sequence[Path] | None = None) -> str:
    """The option's description: its yaml's leading ``#`` comment lines, as one line."""
    return " ".join(x.strip() for x in option_comment(group, name, dirs) if x.strip())
