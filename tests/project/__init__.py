"""Checks of the project as a whole: the import graph, the layout, the docs against the code, the scripts."""
