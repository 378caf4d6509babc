"""Tests of novelfind.cache, a file per module."""
