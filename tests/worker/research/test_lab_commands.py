"""The lab's commands reach ``swarm-worker`` through entry points (lab/pyproject.toml): with the
lab installed they are there with their options; without it the volunteer's command line still
works, and each lab command (and ``simulate --arms``) says in one line how to install it."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

import worker.cli
from worker.cli import LAB_COMMANDS, LAB_INSTALL, build_parser, main


def test_the_installed_lab_adds_its_commands_with_their_options(capsys):
    assert [entry.value for entry in entry_points(group="swarm_worker.commands")] == [
        "swarm_lab.cli:add_parsers"
    ]
    parser = build_parser()
    assert parser.get_default("lab_missing") == ()
    for command, option in (
        ("study", "--design"),
        ("study-report", "--resamples"),
        ("study-batches", "results"),
        ("heterogeneous", "--agents-per-tier"),
    ):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert option in capsys.readouterr().out


@pytest.fixture
def without_the_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    """``swarm-worker`` as the volunteer's package alone sees it: no lab entry points."""
    monkeypatch.setattr(worker.cli, "entry_points", lambda group: [])


@pytest.mark.usefixtures("without_the_lab")
@pytest.mark.parametrize(
    "argv",
    [
        ["study", "--quick", "--design", "v4"],
        ["study-report", "docs/experiments/sapo-table-cpu-v4.json"],
        ["study-batches"],
        ["heterogeneous", "--help"],
    ],
)
def test_without_the_lab_its_commands_say_how_to_install_it(argv: list[str], capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err == f"swarm-worker {argv[0]}: a command of the lab, not installed here: {LAB_INSTALL}\n"
    )


@pytest.mark.usefixtures("without_the_lab")
def test_without_the_lab_the_volunteers_commands_remain(tmp_path, capsys):
    parser = build_parser()
    assert parser.get_default("lab_missing") == LAB_COMMANDS
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = capsys.readouterr().out
    assert all(name in listing for name in ("doctor", "simulate", "join", "export", "campaign-config"))
    assert "study-report" in listing and LAB_INSTALL in " ".join(listing.split())
    assert main(["simulate", "--arms", "8/0", "--quiet", "--out", str(tmp_path / "r.json")]) == 2
    assert (
        capsys.readouterr().err
        == f"swarm-worker simulate: --arms needs the lab's study arms: {LAB_INSTALL}\n"
    )
