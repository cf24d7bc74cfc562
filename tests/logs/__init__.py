"""Tests of reprobuild.logs: the log parser, layer information, the CLI."""
