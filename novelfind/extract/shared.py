"""Several decoders fed from one queue: :class:`SharedDecoder`, the "both" decoder's core (the GPU's and
Pillow's processes decoding one scan's files at once, whichever is free taking the next).

It is a :class:`~novelfind.extract.stage.Decoder` like any other, so the stage drives it as it drives
one decoder; it holds only the queue and the threads, the decoders it shares are the decoders' own.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from novelfind.extract.stage import Decoded, OnWarning

# how long a stopping SharedDecoder waits for each decoder's thread (a running decode's grace, plus slack)
THREAD_JOIN_S = 8.0


class SharedDecoder:
    """Several decoders fed from one queue (``Decoder``): whichever is free takes the next files.

    Each decoder runs in its own thread and claims the next ``claims[name]`` files of ``paths`` when it
    has finished its last claim, so a faster decoder (the GPU's) takes more of them and the scan can pass
    either decoder alone. Results come out in input order, each once. Memory stays bounded: a decoder
    claims only while the claims not yet handed on span at most ``ahead`` files. A decoder that raises
    is reported once through ``on_warning`` and leaves the scan; its claim goes back to the queue, whole
    (nothing of a claim is handed on before all of it is decoded), so no file is lost or reported twice.
    ``taken`` counts the files each decoder decoded.
    """

    def __init__(
        self,
        decoders: dict[str, Any],
        *,
        claims: dict[str, int],
        ahead: int,
        stack: Callable[[list[Any]], Any] = np.stack,
        on_warning: OnWarning | None = None,
    ):
        if not decoders:
            raise ValueError("SharedDecoder needs at least one decoder")
        self.decoders = dict(decoders)
        self.claims = {name: max(1, int(claims.get(name, 1))) for name in self.decoders}
        self.ahead = max(int(ahead), 2 * sum(self.claims.values()))
        self.stack = stack
        self.on_warning = on_warning
        self.taken: dict[str, int] = dict.fromkeys(self.decoders, 0)
        self.threads: list[threading.Thread] = []
        self._cond = threading.Condition()
        self._stop = False

    def decode(self, paths: Sequence[str]) -> Iterator[tuple[int, Decoded]]:
        cond = self._cond
        order: deque[tuple[int, int]] = deque()  # the claims, (start, end), in the order they were made
        returned: deque[tuple[int, int]] = deque()  # claims given back by a decoder that failed
        done: dict[int, list[tuple[int, Decoded]]] = {}  # start -> the claim's results, in order
        state = {"next": 0, "emitted": 0, "busy": 0, "alive": len(self.decoders)}
        errors: list[BaseException] = []
        self._stop = False

        def claim(size: int) -> tuple[int, int] | None:
            """The next files for a free decoder; None when there are none left (or the scan stopped).
            A decoder stays until every claim is decoded: one that fails gives its claim back."""
            while not self._stop:
                if returned:
                    state["busy"] += 1
                    return returned.popleft()
                nxt = state["next"]
                room = nxt == state["emitted"] or nxt + size <= state["emitted"] + self.ahead
                if nxt < len(paths) and room:
                    state["next"] = min(nxt + size, len(paths))
                    order.append((nxt, state["next"]))
                    state["busy"] += 1
                    return nxt, state["next"]
                if nxt >= len(paths) and state["busy"] == 0:
                    return None
                cond.wait()
            return None

        def feed(name: str, decoder: Any) -> None:
            while True:
                with cond:
                    span = claim(self.claims[name])
                if span is None:
                    return
                start, end = span
                try:
                    got = [(start + j, r) for j, r in decoder.decode(paths[start:end])]
                    if len(got) != end - start:
                        raise RuntimeError(f"{name} returned {len(got)} results for {end - start} files")
                except BaseException as e:  # noqa: BLE001 - the other decoders take its work
                    with cond:
                        state["busy"] -= 1
                        if not self._stop:
                            returned.append(span)
                            state["alive"] -= 1
                            if state["alive"] == 0:
                                errors.append(e)
                            elif self.on_warning is not None:
                                self.on_warning(
                                    f"{name} decoding stopped ({type(e).__name__}: {e}); "
                                    "the other decoders go on"
                                )
                        cond.notify_all()
                    return
                with cond:
                    state["busy"] -= 1
                    done[start] = got
                    self.taken[name] += end - start
                    cond.notify_all()

        self.threads = [
            threading.Thread(target=feed, args=(name, d), name=f"novelfind-{name}", daemon=True)
            for name, d in self.decoders.items()
        ]
        for t in self.threads:
            t.start()
        try:
            while True:
                with cond:
                    while not order and state["next"] < len(paths) and not errors:
                        cond.wait(0.5)
                    if not order:
                        if errors:
                            raise errors[0]
                        return
                    start = order[0][0]
                    while start not in done and not errors:
                        cond.wait(0.5)  # a timeout keeps Ctrl-C prompt
                    if start not in done:
                        raise errors[0]
                    order.popleft()
                    got = done.pop(start)
                    state["emitted"] = order[0][0] if order else state["next"]
                    cond.notify_all()
                yield from got
        finally:
            with cond:
                self._stop = True
                cond.notify_all()

    def terminate(self) -> None:
        """Stop every decoder at once; their threads end with their current claim."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for d in self.decoders.values():
            d.terminate()
        self._join()
        for d in self.decoders.values():  # what a thread may have started again before it saw the stop
            d.terminate()

    def close(self) -> None:
        self._join()
        for d in self.decoders.values():
            d.close()

    def _join(self) -> None:
        for t in self.threads:
            t.join(timeout=THREAD_JOIN_S)
        self.threads = []
