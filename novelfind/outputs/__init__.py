"""Everything written after ranking: the results list, copies and links, the HTML report, the contact
sheet, the XMP sidecars."""
