"""Library names: where each imported file goes, from `--template` or the download's layout.

A template such as `"{title} ({year})/{title} ({year}){ext}"` names each video; fields are
`title`, `year`, `season`, `episode` (integers: `{season:02d}`), `name` (the video's own
name without extension) and `ext` (`.mkv`). Title, year, season and episode come from
`--title/--year` or from guessit, a well-kept release-name parser. A subtitle takes its
video's name plus its own suffix: `Film (2001).en.srt`.

Without a template, a single file keeps its name and a folder keeps its layout under its
own name: one library folder per order either way.
"""

from __future__ import annotations

import string
from pathlib import Path, PurePosixPath
from typing import Any

from .media import Video

FIELDS = {"title", "year", "season", "episode", "name", "ext"}
SAMPLE = {"title": "T", "year": 2000, "season": 1, "episode": 1, "name": "n", "ext": ".mkv"}


class BadTemplate(ValueError):
    """The naming template cannot be used (the message says why)."""


class MissingField(ValueError):
    """The template needs a field that neither the options nor the release name give."""


def check_template(template: str) -> set[str]:
    """The fields `template` uses.

    Raises:
        BadTemplate: unknown field, bad format, no `{ext}`, or a path leaving the library.
    """
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise BadTemplate(f"bad template {template!r}: {exc}") from None
    unknown = used - FIELDS
    if unknown:
        raise BadTemplate(f"unknown template field {{{sorted(unknown)[0]}}}; "
                          f"use {', '.join('{' + f + '}' for f in sorted(FIELDS))}")  # fmt: skip
    try:
        template.format(**SAMPLE)
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
        raise BadTemplate(f"bad template {template!r}: {exc}") from None
    if not template.endswith("{ext}"):
        raise BadTemplate("the template must end with {ext} (the file's extension)")
    rel = PurePosixPath(template)
    if rel.is_absolute() or ".." in rel.parts or template.startswith("~"):
        raise BadTemplate("the template must be a relative path inside the library")
    return used


def parse_release(name: str) -> dict[str, Any]:
    """Title, year, season and episode guessed from a release or file name (guessit)."""
    from guessit import guessit  # imported when needed: ~0.3s

    found = dict(guessit(name))
    out: dict[str, Any] = {}
    for key in ("title", "year", "season", "episode"):
        value = found.get(key)
        if isinstance(value, list):  # a double episode: S01E01E02 names the first
            value = value[0]
        if value is not None:
            out[key] = value
    return out


def _clean(part: str) -> str:
    """A path component safe on every filesystem a library lives on."""
    for bad in '<>:"/\\|?*':
        part = part.replace(bad, "" if bad in '<>"?*' else "-")
    return part.strip().rstrip(".") or "_"


def _render(template: str, fields: dict[str, Any], used: set[str], what: str) -> Path:
    missing = sorted(f for f in used if fields.get(f) in (None, ""))
    if missing:
        raise MissingField(f"cannot tell the {', '.join(missing)} of {what!r}; "
                           f"pass --{missing[0] if missing[0] in ('title', 'year') else 'title'}"
                           " or change --template")  # fmt: skip
    # A value never makes a folder: only the template's own slashes do.
    safe = {k: v.replace("/", "-").replace("\\", "-") if isinstance(v, str) else v
            for k, v in fields.items()}  # fmt: skip
    rendered = template.format(**safe)
    return Path(*[_clean(p) for p in PurePosixPath(rendered).parts])


def plan(
    root: Path, videos: list[Video], template: str | None, given: dict[str, Any]
) -> list[tuple[Path, Path]]:
    """(source file, path relative to the library) for every video and subtitle.

    Args:
        root: the download (a file or a folder).
        given: `title`/`year` from the options; they win over the parsed values.
    """
    if template is None:
        base = root.parent
        pairs = [(v.path, v.path.relative_to(base)) for v in videos]
        pairs += [(s.path, s.path.relative_to(base)) for v in videos for s in v.subtitles]
        return pairs
    used = check_template(template)
    release = parse_release(root.name) if {"title", "year"} & used else {}
    pairs, taken = [], set()
    for video in videos:
        fields: dict[str, Any] = {**release, "name": video.path.stem, "ext": video.path.suffix}
        if {"season", "episode"} & used or len(videos) > 1:
            own = parse_release(video.path.name)
            fields.update({k: v for k, v in own.items() if k in ("season", "episode")})
        fields.update({k: v for k, v in given.items() if v is not None})
        dest = _render(template, fields, used, video.path.name)
        part = 1
        while dest in taken:  # CD1/CD2 of one film: "Film (2001) - pt2.mkv"
            part += 1
            dest = dest.with_name(f"{dest.stem.split(' - pt')[0]} - pt{part}{dest.suffix}")
        taken.add(dest)
        pairs.append((video.path, dest))
        stem = dest.name[: -len(dest.suffix)] if dest.suffix else dest.name
        pairs += [(s.path, dest.with_name(f"{stem}{s.suffix}{s.path.suffix}"))
                  for s in video.subtitles]  # fmt: skip
    return pairs
