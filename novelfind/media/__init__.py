"""What a library holds: the walk, the photo, RAW and clip files, their decoding and capture dates,
the ignore list."""
