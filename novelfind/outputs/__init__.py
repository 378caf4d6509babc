"""Everything written after ranking: the results list, copies and links, the report, XMP sidecars."""
