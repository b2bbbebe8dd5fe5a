"""``npulaunch options`` / ``env-vars`` tables fit the terminal (80 columns off one) and never cut a
word without an ellipsis (issue 17)."""

from __future__ import annotations

import re

import pytest
from helpers import run_cli

from npulaunch.config.catalog.envvars import ENV_VARS
from npulaunch.config.catalog.options import OPTIONS
from npulaunch.views.catalogview import render_columns, render_table


@pytest.mark.parametrize("command, specs", [("options", OPTIONS), ("env-vars", ENV_VARS)])
def test_off_a_terminal_the_tables_fit_80_columns_and_keep_every_word(command: str, specs) -> None:
    result = run_cli(command)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    words = set(re.findall(r"\S+", result.stdout))
    for spec in specs:  # every word of every description is there, whole
        assert set(spec.description.split()) <= words, spec.name


@pytest.mark.parametrize("width", [60, 80, 100, 140, 200])
def test_any_width(width: int) -> None:
    for specs in (OPTIONS, ENV_VARS):
        text = render_table(specs, width)
        assert max(len(line) for line in text.splitlines()) <= width
        assert f"({len(specs)} entries)" in text


def test_a_word_longer_than_its_column_ends_in_an_ellipsis() -> None:
    rows = [("name", "text"), ("a", "short words then averyveryverylongwordthatcannotfit end")]
    text = render_columns(rows, (1,), 24, (10, 0))
    cut = [line for line in text.splitlines() if "averyvery" in line]
    assert len(cut) == 1 and cut[0].endswith("…") and "end" in text
    assert all(len(line) <= 24 for line in text.splitlines())
    # a fixed column's cell past its cap is cut with the ellipsis too
    assert "abcdefghi…" in render_columns([("n", "t"), ("abcdefghijklmnop", "x")], (1,), 40, (10, 0))
