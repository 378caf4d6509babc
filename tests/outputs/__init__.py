"""Tests of novelfind.outputs, a file per module."""
