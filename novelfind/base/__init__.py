"""The small base every stage stands on, with no knowledge of photos or ranking.

``atomic`` (files written atomically through descriptors, never through a link), ``dirs`` (every user
folder, by the platform's convention), ``lock`` (output locks), ``safe_load`` (JSON, TOML and XML read
with bounds), ``safe_text`` (names shown to a person: one line, no terminal escapes), ``extras`` (the
optional extras, asked once), ``devices`` (where the model and the solver run), ``limits`` (a number's
allowed range), ``since`` (``--since`` values), ``signature`` (a function's signature from a dataclass).
"""
