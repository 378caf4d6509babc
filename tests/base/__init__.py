"""Tests of novelfind.base, a file per module."""
