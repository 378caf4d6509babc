"""Tests of novelfind.media, a file per module."""
