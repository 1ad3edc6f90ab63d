"""Choosing and naming the files of a download (no database, no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acquire import media, naming


def _make(root: Path, names: list[str]) -> Path:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")
    return root


def _plan(root: Path, template: str | None, **given: object) -> set[str]:
    pairs = naming.plan(root, media.select(root), template, dict(given))
    return {str(rel) for _, rel in pairs}


def test_season_pack_with_subs_per_episode(tmp_path: Path) -> None:
    root = _make(tmp_path / "Show.Name.S02.1080p.WEB-DL-GRP", [
        "Show.Name.S02E01.1080p.WEB-DL-GRP.mkv", "Show.Name.S02E02.1080p.WEB-DL-GRP.mkv",
        "Subs/Show.Name.S02E01.1080p.WEB-DL-GRP/2_English.srt",
        "Subs/Show.Name.S02E02.1080p.WEB-DL-GRP/2_English.srt",
        "Subs/Show.Name.S02E02.1080p.WEB-DL-GRP/3_English.srt",
        "Featurettes/Making.Of.mkv", "Show.Name.S02E01.sample.mkv",
    ])  # fmt: skip
    got = _plan(root, "{title}/Season {season:02d}/{title} S{season:02d}E{episode:02d}{ext}")
    assert got == {
        "Show Name/Season 02/Show Name S02E01.mkv", "Show Name/Season 02/Show Name S02E01.en.srt",
        "Show Name/Season 02/Show Name S02E02.mkv", "Show Name/Season 02/Show Name S02E02.en.srt",
        "Show Name/Season 02/Show Name S02E02.en.2.srt",
    }  # fmt: skip


def test_two_discs_of_one_film_and_no_template(tmp_path: Path) -> None:
    root = _make(tmp_path / "Film.1999.DVDRip", ["CD1/film.avi", "CD2/film.avi", "CD1/film.srt"])
    assert _plan(root, "{title} ({year}){ext}") == {"Film (1999).avi", "Film (1999) - pt2.avi",
                                                    "Film (1999).srt"}  # fmt: skip
    assert _plan(root, None) == {"Film.1999.DVDRip/CD1/film.avi", "Film.1999.DVDRip/CD2/film.avi",
                                 "Film.1999.DVDRip/CD1/film.srt"}  # fmt: skip


def test_options_win_and_unsafe_characters_go(tmp_path: Path) -> None:
    root = _make(tmp_path / "x", ["a.mkv"])
    assert _plan(root, "{title}: {year}{ext}", title="What? Now/Then", year=2001) == {
        "What Now-Then- 2001.mkv"
    }


def test_missing_year_is_a_clear_error(tmp_path: Path) -> None:
    root = _make(tmp_path / "Some.Film.1080p", ["Some.Film.1080p.mkv"])
    with pytest.raises(naming.MissingField, match="pass --year"):
        _plan(root, "{title} ({year}){ext}")
