"""Tests of novelfind.cli, a file per module."""
