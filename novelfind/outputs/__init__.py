"""Everything written after ranking, from plain arguments (nothing here reads the scan's parameters).

``write`` (every output asked for, behind one call), ``formats`` (the results list, ``--format``),
``placement`` (``--copy-to``: copies or links and their manifest), ``thumbnails`` (made in the decode
processes, kept for the next report), ``report`` (the HTML report), ``contact_sheet``, ``xmp`` (one
photo's sidecar: tag, untag) and ``xmp_ledger`` (a run's tags and the record of what novelfind wrote).
"""
