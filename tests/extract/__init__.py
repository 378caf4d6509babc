"""Tests of novelfind.extract, a file per module."""
