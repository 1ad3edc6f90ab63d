"""Which files of a download go into the library: every video, with its subtitles.

As Radarr/Sonarr's completed-download handling does: a video is a file with a video
extension; samples and extras (a `Sample/` or `Extras/` folder, a `-sample` name) are
skipped; a subtitle belongs to a video when it starts with the video's name
(`Film.en.srt` beside `Film.mkv`) or sits in a `Subs/` folder beside it (`Subs/English.srt`,
or `Subs/Film/2_English.srt` in a season pack). What a subtitle's name adds after the
video's name (`.en`, `.en.forced`) is kept as its suffix under the library name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

VIDEO = {".mkv", ".mp4", ".m4v", ".avi", ".ts", ".webm"}
SUBTITLE = {".srt", ".ass", ".ssa", ".sub", ".idx", ".vtt", ".sup"}
EXTRA_DIRS = {"sample", "samples", "extras", "extra", "featurettes", "behind the scenes",
              "deleted scenes", "interviews", "scenes", "shorts", "trailers", "other"}  # fmt: skip
EXTRA_NAME = re.compile(r"(^|[\s._-])(sample|trailer|featurette)([\s._-]|$)", re.IGNORECASE)
SUBS_DIRS = {"subs", "subtitles", "sub"}


@dataclass
class Subtitle:
    """A subtitle file and the suffix it keeps: `.en` for `Film.en.srt`."""

    path: Path
    suffix: str


@dataclass
class Video:
    """A video file to import, with the subtitles that go with it."""

    path: Path
    subtitles: list[Subtitle] = field(default_factory=list)


def is_extra(path: Path, root: Path) -> bool:
    """A sample, trailer or extra: by its folder or its name."""
    parts = path.relative_to(root).parts[:-1] if path != root else ()
    if any(p.lower() in EXTRA_DIRS for p in parts):
        return True
    return bool(EXTRA_NAME.search(path.stem))


def _language(stem: str) -> str:
    """`.en` for `2_English` or `en`: the language of a subtitle named only by it."""
    name = re.sub(r"^\d+[_ .-]*", "", stem).strip() or stem
    try:
        from babelfish import Language  # type: ignore[import-untyped]  # comes with guessit

        lang = Language.fromname(name) if len(name) > 3 else Language.fromietf(name)
        return f".{lang.alpha2}"
    except Exception:  # babelfish raises several unrelated types for an unknown name
        return f".{name}"


def _unique(subs: list[Subtitle]) -> list[Subtitle]:
    """Two subtitles with one suffix (two English tracks) get `.2`, `.3`, ... after it."""
    seen: dict[tuple[str, str], int] = {}
    for sub in subs:
        key = (sub.suffix.lower(), sub.path.suffix.lower())
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            sub.suffix = f"{sub.suffix}.{seen[key]}"
    return subs


def _subtitles_for(video: Path, subs: list[Path], alone: bool) -> list[Subtitle]:
    """The subtitles of `video`; `alone` means it is the only video in its folder."""
    found: list[Subtitle] = []
    for sub in sorted(subs):
        in_subs_dir = any(p.lower() in SUBS_DIRS for p in sub.parent.parts[-2:])
        sub_stem = sub.name[: -len(sub.suffix)]
        if sub.parent == video.parent and sub_stem.startswith(video.stem):
            found.append(Subtitle(sub, sub_stem[len(video.stem) :]))
        elif in_subs_dir and (
            (sub.parent.parent == video.parent and alone)
            or sub.parent.name == video.stem  # a season pack's Subs/<episode>/2_English.srt
        ):
            found.append(Subtitle(sub, _language(sub_stem)))
        elif in_subs_dir and sub.parent.parent == video.parent and sub_stem.startswith(video.stem):
            found.append(Subtitle(sub, sub_stem[len(video.stem) :] or ".und"))
    return _unique(found)


def select(root: Path) -> list[Video]:
    """The videos of a download (a file or a folder) with their subtitles, in name order.

    Raises:
        ValueError: there is no video in it (the message says what was found).
    """
    if root.is_file():  # a single file is what the user or the torrent named: take it
        return [Video(root)]
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    videos = [p for p in paths if p.suffix.lower() in VIDEO and not is_extra(p, root)]
    subs = [p for p in paths if p.suffix.lower() in SUBTITLE and not is_extra(p, root)]
    per_dir: dict[Path, int] = {}
    for v in videos:
        per_dir[v.parent] = per_dir.get(v.parent, 0) + 1
    return [Video(v, _subtitles_for(v, subs, per_dir[v.parent] == 1)) for v in videos]
