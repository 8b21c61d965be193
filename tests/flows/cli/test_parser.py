"""The ``pbg`` argument parser: every subcommand's options, and the values it refuses."""

from __future__ import annotations

import pytest

from flows.cli.parser import build_parser


def test_every_subcommand_parses_its_options() -> None:
    parser = build_parser()
    imp = parser.parse_args(["import", "c.json", "a.tsv", "b.tsv", "-l", "0", "-r", "dst", "--entity-min-count", "2"])
    assert (imp.command, imp.inputs, imp.lhs_col, imp.rhs_col, imp.entity_min_count) == (
        "import",
        ["a.tsv", "b.tsv"],
        0,
        "dst",
        2,
    )
    ev = parser.parse_args(["eval", "c.json", "--filtered", "--filter-path", "p1", "--filter-path", "p2"])
    assert (ev.filtered, ev.filter_path, ev.debug, ev.param) == (True, ["p1", "p2"], False, [])
    exp = parser.parse_args(["export", "c.yaml", "--format", "npy", "--output", "out", "--version", "3"])
    assert (exp.format, exp.output, exp.version, exp.entities_output) == ("npy", "out", 3, None)
    serve = parser.parse_args(["serve", "--config-url", "s3://b/c.json", "-p", "lr=0.1", "--debug"])
    assert (serve.config_url, serve.param, serve.debug, serve.limit, serve.name) == (
        "s3://b/c.json",
        ["lr=0.1"],
        True,
        1,
        None,  # train (pbg/train), or retrain with --retrain-keep-last: cmd_serve decides
    )
    best = [parser.parse_args([cmd, "c.yaml", "--version", "best"]).version for cmd in ("eval", "export")]
    assert best == ["best", "best"] and parser.parse_args(["eval", "c.yaml", "--version", "2"]).version == 2
    train = parser.parse_args(["train", "c.py", "-v", "-p", "num_epochs=2"])
    assert (train.config, train.verbose, train.param) == ("c.py", True, ["num_epochs=2"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["import", "c.json", "a.tsv", "-l", "-1", "-r", "1"], "-1 is negative; give a 0-based column index"),
        (["import", "c.json", "a.tsv", "-l", "0", "-r", "1", "--entity-min-count", "0"], "give a whole number >= 1"),
        (["eval", "c.json", "--version", "latest"], "'latest' is not allowed; give a version number >= 1 or best"),
        (["export", "c.json", "--version", "0"], "'0' is not allowed; give a version number >= 1 or best"),
        (["export", "c.json", "--format", "csv"], "invalid choice: 'csv'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_values_are_usage_errors_naming_them(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["predict", "c.json", "--head", "a", "-k", "0"], "pbg predict: error: argument -k: '0' is not allowed"),
        (["export", "c.json", "--bogus"], "pbg: error: unrecognized arguments: --bogus"),
        ([], "pbg: error: the following arguments are required: command"),
    ],
)
def test_a_bad_option_is_one_line_pointing_to_help(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(line) and err.rstrip().endswith("--help`)"), err
