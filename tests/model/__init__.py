"""Tests of novelfind.model, a file per module."""
