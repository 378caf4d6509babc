"""The extraction stage: feature vectors for a list of image files, from the cache where possible.

Flow for a list of files (walk order):
  1. stat lookup in the cache (path, size, mtime) in chunks: no byte is read for a hit, nor a known failure;
  2. the misses go to a *decoder*, which reads each file once and returns the digest of its bytes, the
     model's input pixels (uint8 224x224x3) and the capture date, in input order, with a bounded window
     of files in flight, so memory does not grow with the library;
  3. a digest already in the cache (moved or renamed file) reuses its vector without inference;
  4. the rest are batched into the extractor; each batch is written to the cache in one transaction,
     with its capture dates, so an interrupted run loses at most the batch in flight.

The package:

- ``stage``: one extraction's bookkeeping (``Stage``: lookups, batches, commits, counts) and what the
  decoders and engines share (``Decoded``, ``Decoder``, ``FeatureStore``, ``decode_file``,
  ``stored_source``); it imports none of them;
- ``shared``: ``SharedDecoder``, several decoders fed from one queue (the "both" decoder);
- ``dating``: the capture dates that travel with the vectors (each kind's reader, ``embedded_date``);
  ``header_dates``: the scan's dates, from the cache, else read in decode processes (``scan_dates``);
- ``decoders``: step 2's alternatives by name (``DECODERS``): ``pillow`` (worker processes), ``gpu``
  (nvImageCodec), ``auto``;
- ``engines``: the whole stage's alternatives by name (``ENGINES``, one ``Engine`` record each, saying
  what it needs): ``local`` (this machine), ``ray`` (a Ray cluster's workers).

This file imports nothing, so importing one part never imports the others.
"""
