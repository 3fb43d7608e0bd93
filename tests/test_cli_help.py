"""The command line as its ecosystem expects one (issue 60): a version, help on every option
with the default argparse read from the parser, a description and examples that work in every
command's help, no internal names in the usage lines, and the old spelling of a renamed flag
still accepted. Parsing and --help only: nothing here runs a search."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

import autotune
from autotune import _refs
from autotune._cli import COMMANDS, build_parser, main
from autotune._cli.help import DeprecatedAlias

TINY = ["--model", "autotune.examples:tiny_model", "--data", "autotune.examples:tiny_data"]


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser, as ``main`` builds them."""
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _flat(text: str) -> str:
    """``text`` with its line wrapping undone: a default may be split across two lines."""
    return " ".join(text.split())


def _shown(action: argparse.Action) -> bool:
    return action.help is not argparse.SUPPRESS


def _has_default(action: argparse.Action) -> bool:
    """Whether the help should show the option's default: a value, not "not given"."""
    default = action.default
    return default is not None and default is not False and default != argparse.SUPPRESS


def test_version_prints_the_package_version(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"autotune {autotune.__version__}\n"


def test_the_version_is_pyprojects() -> None:
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).parent.parent / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert autotune.__version__ == declared


def test_the_commands_are_all_listed_and_walked() -> None:
    commands = _commands()
    assert set(commands) == {c.name for c in COMMANDS}
    assert {"search", "worker", "show", "spaces", "verify", "report", "env"} <= set(commands)
    top = build_parser().format_help()
    assert all(name in top for name in commands)


@pytest.mark.parametrize("name", [c.name for c in COMMANDS])
def test_every_option_has_help(name) -> None:
    parser = _commands()[name]
    missing = [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if a.help is None or (isinstance(a.help, str) and not a.help.strip())
    ]
    assert not missing, f"`autotune {name}`: no help for {missing}"


@pytest.mark.parametrize("name", [c.name for c in COMMANDS])
def test_help_has_a_description_and_examples(name) -> None:
    parser = _commands()[name]
    assert parser.description and len(parser.description) > 40
    text = parser.format_help()
    assert "\nexamples:\n" in text
    assert f"  autotune {name}" in text.split("\nexamples:\n")[1]


@pytest.mark.parametrize("name", [c.name for c in COMMANDS])
def test_help_shows_each_default_once_and_never_none(name) -> None:
    """argparse writes each default from the parser's value; one written by hand too would
    show twice (and go stale); "not given" (None, False) shows none."""
    parser = _commands()[name]
    text = _flat(parser.format_help())
    assert "(default: None)" not in text and "(default: False)" not in text
    for action in filter(_shown, parser._actions):
        if _has_default(action):
            assert f"(default: {action.default})" in text, (name, action.option_strings)
            assert "default" not in (action.help or ""), (name, action.option_strings)


def test_search_help_shows_the_defaults_the_issue_named() -> None:
    text = _flat(_commands()["search"].format_help())
    for shown in (
        "--space NAME|FILE",
        "(default: default)",
        "--seed SEED",
        "(default: 0)",
        "(default: best.json)",
        "(default: sqlite:///autotune.db)",
        "(default: 0.01)",
    ):
        assert shown in text, shown


def _metavars(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option that takes a value -> what its usage line calls the value."""
    out = {}
    for action in filter(_shown, parser._actions):
        if action.option_strings and action.nargs != 0 and action.choices is None:
            out[action.option_strings[-1]] = action.metavar or action.dest.upper()
    return out


@pytest.mark.parametrize("name", [c.name for c in COMMANDS])
def test_no_usage_line_leaks_a_field_name(name) -> None:
    """A value named after the field it fills (--trials N_TRIALS, --loss LOSS_FN) reads as
    autotune's internals; one named after its flag (--seed SEED) is fine."""
    leaked = {
        flag: metavar
        for flag, metavar in _metavars(_commands()[name]).items()
        if metavar != flag.lstrip("-").replace("-", "_").upper()
        and metavar.lower() in {a.dest for a in _commands()[name]._actions}
    }
    assert not leaked, leaked


def test_the_search_usage_names_values_plainly() -> None:
    metavars = _metavars(_commands()["search"])
    assert metavars["--trials"] == "N"
    assert metavars["--loss"] == "MODULE:FN"
    assert metavars["--model"] == "MODULE:FN"
    assert metavars["--nproc-per-node"] == "N"
    assert metavars["--processes"] == "N"


def _examples() -> list[tuple[str, list[str]]]:
    """Every example command of every help, as argv (a redirection cut off)."""
    out = []
    for c in COMMANDS:
        for line in c.examples:
            if line.startswith("#"):
                continue
            words = shlex.split(line.split(" > ")[0])
            assert words[0] == "autotune", line
            out.append((c.name, words[1:]))
    return out


@pytest.mark.parametrize(("name", "argv"), _examples())
def test_every_example_parses_and_names_factories_that_exist(name, argv) -> None:
    args = build_parser().parse_args(argv)  # a worker's example starts its search too
    assert args.command == argv[0] and name in {c.name for c in COMMANDS}
    for value in argv:
        if value.startswith("autotune.examples:"):
            assert callable(_refs.load(value)), value


def test_out_defaults_to_best_json() -> None:
    parser = build_parser()
    assert parser.parse_args(["search", *TINY]).out == "best.json"
    assert parser.parse_args(["search", *TINY, "--out", "x.json"]).out == "x.json"


def test_processes_is_the_flag_and_workers_its_deprecated_alias(capsys) -> None:
    parser = build_parser()
    assert parser.parse_args(["search", *TINY]).processes == 1
    assert parser.parse_args(["search", *TINY, "--processes", "3"]).processes == 3
    assert capsys.readouterr().err == ""
    assert parser.parse_args(["search", *TINY, "--workers", "3"]).processes == 3
    err = capsys.readouterr().err
    assert err == (
        "autotune search: warning: --workers is deprecated; use --processes (the same: search "
        "processes, not DataLoader workers)\n"
    )
    search = _commands()["search"]
    assert "--workers" not in search.format_help()  # the new spelling is the one to learn
    assert any(isinstance(a, DeprecatedAlias) for a in search._actions)


@pytest.mark.parametrize("flag", ["--processes", "--workers"])
def test_fewer_than_one_process_is_a_clear_error(capsys, flag) -> None:
    assert main(["search", *TINY, flag, "0"]) == 2
    assert "autotune search: error: --processes must be >= 1, but got 0." in (
        capsys.readouterr().err
    )


def test_a_trainer_takes_no_processes(tmp_path, capsys) -> None:
    argv = ["search", "--trainer", "no_such_module_xyz:make", "--out", str(tmp_path / "x.json")]
    assert main([*argv, "--processes", "2"]) == 2
    assert "--trainer: --processes do not apply" in capsys.readouterr().err


def test_worker_help_cannot_be_read_as_dataloader_workers() -> None:
    text = _flat(_commands()["worker"].format_help())
    assert "not DataLoader workers" in _flat(_commands()["search"].format_help())
    assert "nothing to do with DataLoader workers" in text
    assert "search process" in text
