"""Tests of reprobuild.logs: the log parser, the C scanner, layer information, the CLI."""
