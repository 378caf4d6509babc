"""The decoders of the extraction stage, by name (``DECODERS``): what reads each file once and hands the
stage its digest and the model's input pixels.

- ``pillow`` (``pillow.ProcessDecoder``): Pillow, and LibRaw for RAW files, in worker processes;
- ``gpu`` (``gpu.GpuFileDecoder``): JPEGs on the model's GPU with nvImageCodec, the rest with Pillow;
- ``auto``, the default (:func:`auto_decoder`): the GPU decoder and Pillow processes at once, fed from one
  queue (``shared.SharedDecoder``: whichever is free takes the next files) when the model runs on CUDA
  and nvImageCodec is installed, else ``pillow``.

Another decoder is a class (or factory) with the same constructor (``workers``, ``window``, ``known``,
``extractor``, ``on_warning``, ``timeout``) and the ``stage.Decoder`` methods, registered here by name as
"module:attribute": it is imported only when chosen, and the name becomes a valid ``decoder`` at once.
"""

from __future__ import annotations

import warnings
from typing import Any

from novelfind.extract.decoders import pillow
from novelfind.extract.stage import Decoder, OnWarning

DECODERS: dict[str, str] = {
    "auto": "novelfind.extract.decoders:auto_decoder",
    "pillow": "novelfind.extract.decoders.pillow:ProcessDecoder",
    "gpu": "novelfind.extract.decoders.gpu:GpuFileDecoder",
}


def auto_decoder(
    workers: int = 0,
    window: int = 1,
    known: frozenset[str] = frozenset(),
    extractor: Any = None,
    on_warning: OnWarning | None = None,
    **context: Any,
) -> Decoder:
    """The "auto" decoder: when ``extractor`` runs on CUDA and nvImageCodec is installed, the GPU decoder
    sharing the work with Pillow processes (``gpu.both_decoder``; the GPU decoder alone when
    ``workers`` is 0: few files to decode), else Pillow in worker processes (``pillow.ProcessDecoder``).

    Without the library (an optional extra) this is silent; a library that fails its start-up check is
    reported once through ``on_warning`` and the scan decodes on the CPU. A CPU model never imports
    ``decoders.gpu`` (nor torch through it).
    """
    timeout = context.get("timeout")
    if str(getattr(extractor, "device", "cpu")).startswith("cuda"):
        import novelfind.extract.decoders.gpu as gpu_decode

        if gpu_decode.library_installed():
            try:
                if workers > 0:  # GPU and Pillow processes at once: whichever is free takes the next files

                    def cpu(n: int) -> pillow.ProcessDecoder:
                        return pillow.ProcessDecoder(n, max(1, window), known, timeout=timeout)

                    return gpu_decode.both_decoder(workers, window, known, extractor, on_warning, cpu=cpu)
                return gpu_decode.GpuFileDecoder(
                    workers, window, known, extractor, on_warning, timeout=timeout
                )
            except gpu_decode.GpuDecodeUnavailable as e:
                message = f"GPU JPEG decoding unavailable ({e}); decoding on the CPU"
                if on_warning is not None:
                    on_warning(message)
                else:
                    warnings.warn(message, RuntimeWarning, stacklevel=2)
    return pillow.ProcessDecoder(workers, window, known, timeout=timeout)
