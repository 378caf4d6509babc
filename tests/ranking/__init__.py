"""Tests of novelfind.ranking, a file per module."""
