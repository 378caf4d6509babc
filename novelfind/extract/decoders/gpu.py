"""JPEG decoding on the GPU for ``--device cuda``: nvImageCodec (nvJPEG) in batches, the model's geometry
applied on the device, Pillow for everything else.

Why nvImageCodec (``pip install novelfind[gpu]``: nvidia-nvimgcodec-cu13 with nvidia-nvjpeg): it is NVIDIA's
maintained batch decoder over nvJPEG (the hardware JPEG engines of A100/H100-class cards, and CUDA decoding
on every other card), it does not depend on the PyTorch build (one wheel for any torch), and it is small:
25 MB for the wheel plus 3.8 MB for nvJPEG (cp312, x86-64). The alternatives: torchvision's
``decode_jpeg(device='cuda')`` is deprecated since torchvision 0.29; TorchCodec's image decoders arrived in
0.16, its CUDA builds come from the PyTorch index and must match the installed torch exactly, and it needs
the system's FFmpeg; DALI's wheel is 199 MB and brings a whole pipeline framework.

A batch of files goes through:

1. the CPU (threads): read the bytes, blake2b digest (the cache's content identity, as on the CPU path),
   and a header check (``inspect_jpeg``). Only 8-bit baseline, extended or progressive Huffman JPEGs in
   YCbCr or greyscale, ending in an EOI marker and at most ``GPU_MAX_PIXELS``, go to the GPU; every other
   file (PNG, HEIC, CMYK or RGB-coded JPEG, arithmetic or lossless JPEG, a truncated file) is decoded by
   Pillow exactly as on the CPU path;
2. the GPU: nvImageCodec decodes them at full resolution, orientation not applied (nvJPEG cannot decode
   at a reduced scale);
3. the GPU: the CPU path's geometry. Pillow's ``draft`` (libjpeg's DCT-domain 1/2, 1/4 or 1/8 decode) is
   emulated by an average over the same pixel blocks, then EXIF orientation (read on the CPU with Pillow,
   so it means what it means on the CPU path), then Pillow's antialiased bilinear resize of the centre
   crop, its filter weights computed as Pillow computes them; each stage is rounded to 8 bits like
   Pillow's. The result is the same uint8 (224, 224, 3) as ``decode.to_model_input``, up to the
   difference between a DCT-domain reduction and a block average (a level or two of 255);
4. a file the GPU decoder rejects goes to Pillow, per file: one bad file never fails the batch.

This module is the backend and the pipeline's glue: the nvImageCodec binding (``NvImageCodec``), the batch
decoder over any ``JpegBackend`` (``GpuDecoder``) and the pipeline's decoders. Step 1's header check is
``jpeg_header`` and step 3's geometry ``gpu_geometry`` (their names are importable from here too).

For the extraction pipeline (``decoders.DECODERS``): ``GpuFileDecoder`` is the "gpu" decoder (the GPU
decoder alone); the default "auto" one (``decoders.auto_decoder``), when the model runs on CUDA and
nvImageCodec is installed, is the GPU decoder and Pillow processes at once (``both_decoder``: one queue,
whichever is free takes the next files, so the scan can pass the GPU decoder alone).
torch is imported only where a GPU path runs, so the "auto" choice costs a CPU scan nothing. Everything
but ``NvImageCodec`` is plain torch and runs on the CPU too, which is how it is tested there.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from novelfind.base import door, extras
from novelfind.base.devices import available_cpus
from novelfind.errors import DecodeError
from novelfind.extract.dating import embedded_date
from novelfind.extract.decoders import pillow

# (the header check's and the geometry's other names are importable from here too)
from novelfind.extract.decoders.gpu_geometry import _reduce, model_input, orient  # noqa: F401
from novelfind.extract.decoders.jpeg_header import (  # noqa: F401
    GPU_MAX_PIXELS,
    JpegInfo,
    draft_factor,
    inspect_jpeg,
)
from novelfind.extract.shared import SharedDecoder
from novelfind.extract.stage import Decoded, Decoder
from novelfind.media.decode import INPUT_SIZE, file_digest, model_input_from_bytes, read_bytes
from novelfind.media.kinds import kind_of

if TYPE_CHECKING:
    import torch

# Most pixels decoded in one call of the GPU decoder: 2**29 = 537 MP = 1.6 GB of RGB (44 x 12 MP).
BATCH_PIXELS = 2**29
# Files per group in FileDecoder: read, digested and decoded together; the next group is read meanwhile.
GROUP = 64


class GpuDecodeUnavailable(RuntimeError):
    """GPU JPEG decoding cannot run here (no CUDA, library missing or failing its check)."""


# --------------------------------------------------------------------------- decoders


class JpegBackend(Protocol):
    """Decodes JPEG bytes at full resolution, orientation not applied: (H, W, 3 or 1) uint8 tensors on
    ``device``, None where a file cannot be decoded. May raise for the whole call."""

    device: torch.device

    def decode(self, datas: Sequence[bytes]) -> list[torch.Tensor | None]: ...


@contextlib.contextmanager
def _stderr_to(sink: list[str]):
    """Send what native code writes on stderr (fd 2) during the block to ``sink`` instead."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        try:
            os.dup2(tmp.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", "replace"))


def library_installed() -> bool:
    """Whether nvImageCodec's Python package is importable (it is an optional extra)."""
    return extras.installed("nvidia.nvimgcodec")


class NvImageCodec:
    """nvImageCodec's GPU JPEG decoders: the hardware decoder where the card has one, CUDA otherwise.

    ``kinds`` limits the backends (names: hw, gpu, hybrid); nvImageCodec's own CPU decoders are never
    used (Pillow is the fallback). ``hw_load``: the share of a batch offered to the hardware decoder (the
    rest goes to the CUDA decoders; None: nvImageCodec's default). ``adaptive``: let nvImageCodec balance
    the backends by their idle time. ``options`` is nvImageCodec's decoder option string.
    ``reuse_buffers`` hands the last batch's device buffers back to the decoder.
    """

    KINDS = {"hw": "HW_GPU_ONLY", "gpu": "GPU_ONLY", "hybrid": "HYBRID_CPU_GPU"}

    def __init__(
        self,
        device: torch.device | str = "cuda",
        *,
        kinds: Sequence[str] = ("hw", "gpu", "hybrid"),
        hw_load: float | None = None,
        adaptive: bool = False,
        options: str = "",
        reuse_buffers: bool = True,
    ):
        import torch

        self.device = torch.device(device)
        if self.device.type != "cuda" or not torch.cuda.is_available():
            raise GpuDecodeUnavailable("no CUDA device")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        # nvImageCodec logs to stderr; keep it quiet unless the user asked for its messages
        os.environ.setdefault("PYNVIMGCODEC_VERBOSITY", "0")
        messages: list[str] = []
        try:
            with _stderr_to(messages):  # "cannot load nvjpeg2k/nvtiff" notes for codecs we never use
                from nvidia import nvimgcodec

                backends = []
                for k in kinds:
                    kind = getattr(nvimgcodec.BackendKind, self.KINDS[k])
                    extra: dict[str, Any] = {}
                    if adaptive:
                        extra["load_hint_policy"] = nvimgcodec.LoadHintPolicy.ADAPTIVE_MINIMIZE_IDLE_TIME
                    if k == "hw" and hw_load is not None:
                        extra["load_hint"] = float(hw_load)
                    backends.append(nvimgcodec.Backend(kind, **extra))
                self._decoder = nvimgcodec.Decoder(
                    device_id=self.device.index, backends=backends, options=options
                )
        except Exception as e:  # noqa: BLE001 - any failure to start means "not available"
            raise GpuDecodeUnavailable(f"nvImageCodec: {_one_line(e)}{_first_note(messages)}") from None
        self.notes = "".join(messages).strip()
        self._params = nvimgcodec.DecodeParams(
            apply_exif_orientation=False, color_spec=nvimgcodec.ColorSpec.SRGB, allow_any_depth=False
        )
        self.version = getattr(nvimgcodec, "__version__", "?")
        self.kinds = tuple(kinds)
        self._reuse = reuse_buffers
        self._spare: list[Any] = []  # images of the last call, their device buffers reused by the next

    def decode(self, datas: Sequence[bytes]) -> list[torch.Tensor | None]:
        import torch

        stream = torch.cuda.current_stream(self.device)
        kwargs: dict[str, Any] = {"params": self._params, "cuda_stream": stream.cuda_stream}
        datas = list(datas)
        images = None
        if self._reuse and len(self._spare) >= len(datas):
            stream.synchronize()  # nothing reads the last batch's buffers any more
            try:
                images = self._decoder.decode(datas, images=self._spare[: len(datas)], **kwargs)
            except Exception:  # noqa: BLE001 - an nvImageCodec that cannot reuse: decode as usual
                self._reuse, self._spare = False, []
        if images is None:
            images = self._decoder.decode(datas, **kwargs)
        if self._reuse:
            self._spare = [im for im in images if im is not None] + self._spare[len(datas) :]
        return [None if im is None else _tensor_of(im, self.device) for im in images]


def _tensor_of(image: Any, device: torch.device) -> torch.Tensor:
    """A torch view of an nvImageCodec image in device memory (no copy)."""
    import torch

    try:
        return torch.from_dlpack(image)
    except Exception:  # noqa: BLE001 - older DLPack handshakes: the CUDA array interface
        return torch.as_tensor(image, device=device)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]


def _first_note(messages: list[str]) -> str:
    lines = [ln.strip() for m in messages for ln in m.splitlines() if ln.strip()]
    return f" ({lines[0][:160]})" if lines else ""


@dataclass
class DecodedBatch:
    """The model's input for a batch of files, on the device, and the files left to Pillow."""

    pixels: torch.Tensor  # uint8 (B, 224, 224, 3); the rows of ``fallback`` entries are zero
    fallback: dict[int, str] = field(default_factory=dict)  # position -> why the GPU did not decode it


class GpuDecoder:
    """Batches of encoded files -> model input on the device, JPEGs decoded by ``backend``."""

    def __init__(self, backend: JpegBackend, *, batch_pixels: int = BATCH_PIXELS):
        import torch

        self.backend = backend
        self.device = torch.device(backend.device)
        self.batch_pixels = batch_pixels
        self.stats: Counter[str] = Counter()  # decoded / fallback counts

    def decode(self, datas: Sequence[bytes], infos: Sequence[JpegInfo | str] | None = None) -> DecodedBatch:
        """Decode ``datas``; ``infos`` are their ``inspect_jpeg`` results when already known."""
        import torch

        if infos is None:
            infos = [inspect_jpeg(d) for d in datas]
        out = torch.zeros((len(datas), INPUT_SIZE, INPUT_SIZE, 3), dtype=torch.uint8, device=self.device)
        fallback: dict[int, str] = {}
        todo = []
        for i, info in enumerate(infos):
            if isinstance(info, JpegInfo):
                todo.append(i)
            else:
                fallback[i] = info
        for chunk in self._chunks(todo, infos):
            for i, pixels in zip(chunk, self._decode_chunk([datas[i] for i in chunk]), strict=True):
                if isinstance(pixels, str):
                    fallback[i] = pixels
                    continue
                reason = self._fill(out, i, pixels, infos[i])
                if reason is not None:
                    fallback[i] = reason
        self.stats["gpu"] += len(datas) - len(fallback)
        self.stats["fallback"] += len(fallback)
        return DecodedBatch(out, fallback)

    def _chunks(self, todo: list[int], infos) -> Iterator[list[int]]:
        chunk: list[int] = []
        pixels = 0
        for i in todo:
            if chunk and pixels + infos[i].pixels > self.batch_pixels:
                yield chunk
                chunk, pixels = [], 0
            chunk.append(i)
            pixels += infos[i].pixels
        if chunk:
            yield chunk

    def _decode_chunk(self, datas: list[bytes]) -> list[torch.Tensor | str]:
        """Decode a chunk; if the whole call fails, each file alone, so that only the culprit is lost."""
        try:
            got = self.backend.decode(datas)
            if len(got) != len(datas):
                raise RuntimeError(f"decoder returned {len(got)} images for {len(datas)} files")
        except Exception as e:  # noqa: BLE001 - the batch must survive its worst file
            if len(datas) == 1:
                return [f"GPU decoder failed: {_one_line(e)}"]
            return [r for d in datas for r in self._decode_chunk([d])]
        return [p if p is not None else "GPU decoder rejected the file" for p in got]

    def _fill(self, out: torch.Tensor, i: int, pixels: torch.Tensor, info: JpegInfo) -> str | None:
        import torch

        if pixels.ndim != 3 or pixels.dtype != torch.uint8 or pixels.shape[2] not in (1, 3):
            return f"GPU decoder gave {pixels.dtype} {tuple(pixels.shape)}"
        if tuple(pixels.shape[:2]) != (info.height, info.width):
            got = f"{pixels.shape[1]}x{pixels.shape[0]}"
            return f"GPU decoder gave {got}, header says {info.width}x{info.height}"
        if pixels.shape[2] == 1:
            pixels = pixels.expand(-1, -1, 3)
        try:
            out[i] = model_input(pixels, info)
        except torch.cuda.OutOfMemoryError:
            return "out of GPU memory"
        except Exception as e:  # noqa: BLE001 - one file, not the batch
            return f"GPU resize failed: {_one_line(e)}"
        return None


def open_gpu_decoder(device: torch.device | str = "cuda", **backend_options: Any) -> GpuDecoder:
    """A checked GpuDecoder on ``device``: GpuDecodeUnavailable when the library is missing or its first
    decode does not match Pillow's."""
    if not library_installed():
        raise GpuDecodeUnavailable("nvImageCodec is not installed (pip install novelfind[gpu])")
    gpu = GpuDecoder(NvImageCodec(device, **backend_options))
    self_check(gpu)
    return gpu


def _check_jpeg() -> bytes:
    """A small photo-like JPEG (smooth colours and texture), 4:2:0, quality 95."""
    from PIL import Image

    yy, xx = np.mgrid[0:240, 0:320].astype(np.float32)
    rgb = np.stack([xx * 0.8, yy, 255 - (xx + yy) * 0.4], -1) + 20 * np.sin(xx / 7.0)[..., None]
    buf = io.BytesIO()
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def self_check(gpu: GpuDecoder) -> None:
    """Decode one known JPEG on the GPU and compare with the Pillow path; GpuDecodeUnavailable if off."""
    data = _check_jpeg()
    want = model_input_from_bytes(data, "check.jpg").astype(np.float32)
    try:
        batch = gpu.decode([data])
    except Exception as e:  # noqa: BLE001
        raise GpuDecodeUnavailable(f"check decode failed: {_one_line(e)}") from None
    if batch.fallback:
        raise GpuDecodeUnavailable(f"check decode failed: {batch.fallback[0]}")
    got = batch.pixels[0].cpu().numpy().astype(np.float32)
    diff = float(np.abs(got - want).mean())
    if not diff <= 3.0:
        raise GpuDecodeUnavailable(f"check decode differs from Pillow by {diff:.1f} levels on average")
    gpu.stats.clear()


# --------------------------------------------------------------------------- the pipeline's decoders


class GpuFileDecoder:
    """The pipeline's "gpu" decoder (``stage.Decoder``): JPEGs decoded on the model's GPU, the rest by
    Pillow; ``decode(paths)`` yields ``(position, Decoded)`` in input order.

    Pixels decoded on the GPU stay there (a (224, 224, 3) uint8 tensor; ``stack`` makes the batch on the
    device); Pillow's are numpy arrays. ``workers`` threads (default: one per core) read, digest and
    inspect the files (all of which release the GIL), one ``group`` ahead of the GPU. Every file the GPU
    does not decode (not a plain JPEG, rejected by the GPU decoder, a clip) goes to ``fallback``, Pillow
    and PyAV in decode processes (``pillow.ProcessDecoder``, default: ``workers`` of them, at least one),
    so that the decode time limit (``timeout``) holds there as on the CPU path: a thread cannot be
    stopped. Such a file is read again in its process (that costs less than sending its bytes there).
    Raises GpuDecodeUnavailable when GPU decoding cannot run. ``gpu`` replaces the checked nvImageCodec
    decoder (tests, benchmarks).

    :meth:`share_with` a CPU decoder: Pillow processes take part of the files from one queue, so a scan
    can pass the GPU decoder alone (``both_decoder``); ``stats["cpu"]`` counts the files they decoded.
    """

    def __init__(
        self,
        workers: int = 0,
        window: int = 0,
        known: frozenset[str] = frozenset(),
        extractor: Any = None,
        on_warning: Callable[[str], None] | None = None,
        *,
        gpu: GpuDecoder | None = None,
        group: int = GROUP,
        fallback: pillow.ProcessDecoder | None = None,
        **context: Any,
    ):
        self.gpu = gpu if gpu is not None else open_gpu_decoder(str(getattr(extractor, "device", "cuda")))
        self.threads = max(1, workers or available_cpus())
        if fallback is None:
            processes = max(1, workers)
            fallback = pillow.ProcessDecoder(
                processes, max(window, 2 * processes), known, context.get("timeout")
            )
        self.fallback = fallback
        self.known = known
        self.group = max(1, group)
        self.pool: ThreadPoolExecutor | None = None
        self.stats: Counter[str] = Counter()  # gpu / pillow / known / clip / failed (/ cpu)
        self.shared: SharedDecoder | None = None

    def share_with(
        self, cpu: Decoder, *, claim: int, on_warning: Callable[[str], None] | None = None
    ) -> None:
        """Share the work with ``cpu``, a CPU decoder (Pillow processes), fed from one queue
        (``SharedDecoder``): each side, in its own thread, claims the next files when it is free. The GPU
        side claims ``2 * group`` files at a time (its reads of the next group overlap the decoding of this
        one), the CPU side ``claim``."""
        claims = {"gpu": 2 * self.group, "cpu": claim}
        self.shared = SharedDecoder(
            {"gpu": _Alone(self), "cpu": cpu},
            claims=claims,
            ahead=2 * sum(claims.values()),
            stack=stack_pixels,
            on_warning=on_warning,
        )

    @staticmethod
    def stack(pixels: list[Any]) -> Any:
        return stack_pixels(pixels)

    def _read(self, path: str) -> tuple[Decoded | None, bytes | None, JpegInfo | str | None]:
        """(digest and capture date, bytes, what ``inspect_jpeg`` says), or a failure or a known digest
        without bytes; for a clip (a few keyframes through PyAV in a decode process; never read whole here)
        nothing."""
        if not kind_of(path).whole:
            return None, None, None
        try:
            with door.recording() as opened:  # which file the bytes came from, for the stage to check
                data = read_bytes(path)
        except DecodeError as e:
            return Decoded(None, reason=str(e) or "cannot read"), None, None
        head = Decoded(file_digest(data), taken=embedded_date(path), seen=opened[0] if opened else None)
        if head.digest in self.known:
            return head, None, None
        return head, data, inspect_jpeg(data)

    def decode(self, paths: Sequence[str]) -> Iterator[tuple[int, Decoded]]:
        if self.shared is None:
            yield from self._decode(paths)
            return
        try:
            yield from self.shared.decode(paths)
        finally:
            self.stats["cpu"] = self.shared.taken["cpu"]

    def decode_again(self, paths: Sequence[str]) -> Iterator[tuple[int, Decoded]]:
        """Files whose vectors left the cache during the scan, for their pixels: in a decode process
        (``ProcessDecoder.decode_again``), where the time limit holds."""
        return self.fallback.decode_again(paths)

    def _decode(self, paths: Sequence[str]) -> Iterator[tuple[int, Decoded]]:
        """The GPU side alone."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="novelfind-read")
        pool = self.pool
        reads: list[Future | None] = []
        for g0 in range(0, len(paths), self.group):
            g1 = min(g0 + self.group, len(paths))
            while len(reads) < min(g1 + self.group, len(paths)):  # read the next group meanwhile
                reads.append(pool.submit(self._read, paths[len(reads)]))
            got = [reads[i].result() for i in range(g0, g1)]  # type: ignore[union-attr]
            for i in range(g0, g1):
                reads[i] = None  # let the bytes go
            yield from self._group(paths, g0, got)

    def _group(self, paths: Sequence[str], g0: int, got: list) -> Iterator[tuple[int, Decoded]]:
        """Decode one group: plain JPEGs on the GPU while the decode processes take the other files,
        then the JPEGs the GPU gave back."""
        pool = self.pool
        assert pool is not None
        results: list[Decoded | None] = [None] * len(got)
        cpu: list[int] = []
        to_gpu: list[int] = []
        for j, (head, data, info) in enumerate(got):
            if head is not None and (head.digest is None or data is None):  # unreadable, or its vector cached
                results[j] = head
                self.stats["failed" if head.digest is None else "known"] += 1
            elif isinstance(info, JpegInfo):
                to_gpu.append(j)
            else:
                cpu.append(j)
        first = pool.submit(self._fallback, paths, g0, cpu) if cpu else None
        rejected: list[int] = []
        if to_gpu:
            batch = self.gpu.decode([got[j][1] for j in to_gpu], [got[j][2] for j in to_gpu])
            for k, j in enumerate(to_gpu):
                if k in batch.fallback:
                    rejected.append(j)
                else:
                    results[j] = got[j][0]._replace(pixels=batch.pixels[k])
                    self.stats["gpu"] += 1
        done = first.result() if first is not None else []
        if rejected:  # after the first call: a ProcessDecoder decodes one list at a time
            done += self._fallback(paths, g0, rejected)
        for j, decoded in done:
            results[j] = decoded
            if decoded.digest is None or decoded.pixels is None:
                self.stats["failed" if decoded.digest is None else "known"] += 1
            else:
                self.stats["pillow" if kind_of(paths[g0 + j]).whole else "clip"] += 1
        for j in range(len(got)):
            yield g0 + j, results[j]  # type: ignore[misc]

    def _fallback(self, paths: Sequence[str], g0: int, js: list[int]) -> list[tuple[int, Decoded]]:
        """Files ``g0 + j`` of ``paths``, for j in ``js``, decoded in the decode processes: (j, result)."""
        return [(js[pos], decoded) for pos, decoded in self.fallback.decode([paths[g0 + j] for j in js])]

    def terminate(self) -> None:
        """Stop now: queued reads are cancelled, running ones finish on their own (and the processes
        sharing the work are stopped)."""
        if self.shared is not None:
            self.shared.terminate()  # stops this side too, through _Alone
        self._terminate()

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()
        self._close()

    def _terminate(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        self.fallback.terminate()

    def _close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self.fallback.close()


class _Alone:
    """A ``GpuFileDecoder``'s own GPU side, as one of the decoders of its ``SharedDecoder``."""

    def __init__(self, owner: GpuFileDecoder):
        self.owner = owner

    def decode(self, paths: Sequence[str]) -> Iterator[tuple[int, Decoded]]:
        return self.owner._decode(paths)

    def terminate(self) -> None:
        self.owner._terminate()

    def close(self) -> None:
        self.owner._close()


def stack_pixels(rows: Sequence[Any]) -> Any:
    """Stack decoded rows (device tensors and numpy arrays) into one batch: a tensor on the device of the
    first tensor row, or a numpy array when all rows are numpy."""
    if not any(type(r).__module__.startswith("torch") for r in rows):
        return np.stack(rows)
    import torch

    device = next(r.device for r in rows if isinstance(r, torch.Tensor))
    return torch.stack([r if isinstance(r, torch.Tensor) else torch.from_numpy(r).to(device) for r in rows])


def both_decoder(
    workers: int = 0,
    window: int = 1,
    known: frozenset[str] = frozenset(),
    extractor: Any = None,
    on_warning: Callable[[str], None] | None = None,
    *,
    cpu: Callable[[int], Decoder],
    gpu: GpuDecoder | None = None,
    **context: Any,
) -> GpuFileDecoder:
    """The GPU decoder and ``cpu(n)``, a CPU decoder of n processes (``pillow.ProcessDecoder``), at once,
    with n = ``workers - 1``: one core is left to the GPU side's reading threads and the model's thread.
    The GPU side's own fallback (the files of its claims the GPU does not decode) is ``cpu(1)``, so the
    scan runs ``workers`` decode processes in all, as the decoded-pixels budget assumes.
    Raises GpuDecodeUnavailable when GPU decoding cannot run (before any process is made)."""
    threads = workers or available_cpus()
    decoder = GpuFileDecoder(threads, window, known, extractor, on_warning, gpu=gpu, fallback=cpu(1))
    processes = max(1, threads - 1)
    decoder.share_with(cpu(processes), claim=max(64, 8 * processes), on_warning=on_warning)
    return decoder
