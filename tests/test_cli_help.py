"""Every CLI command documents itself with an example, and errors are clean one-liners."""

from __future__ import annotations

import pytest

from rocketstream import cli


def _commands() -> list[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)


def test_every_command_has_an_example():
    assert set(_commands()) == set(cli.EXAMPLES), "a command without an EXAMPLES entry (or a stale entry)"


@pytest.mark.parametrize("command", _commands())
def test_help_shows_description_and_example(command, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out
    assert f"rocketstream {command}" in out
    assert "--json" in out and "--store" in out


def test_commands_are_kebab_case():
    for command in _commands():
        assert command == command.lower() and "_" not in command
