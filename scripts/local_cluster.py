#!/usr/bin/env python3
"""A Ray cluster of several nodes on this one machine, to try ``novelfind scan --engine ray`` on.

Starts a head node (no CPUs of its own, like the head of a real cluster) and ``--workers`` worker nodes
of ``--cpus`` CPUs each, prints the address to give ``--ray-address`` on stdout, and keeps them running
until Ctrl-C (or SIGTERM), when it stops them all:

    python scripts/local_cluster.py --workers 2 &        # prints e.g. 127.0.0.1:61234
    novelfind scan ~/Pictures --engine ray --ray-address 127.0.0.1:61234

The nodes share this machine's cores, so this shows how the engine behaves (nodes, results streaming
back, a node lost with ``kill``), not a speed-up. Needs ``pip install 'novelfind[ray]'``.
"""

from __future__ import annotations

import argparse
import signal
import sys

MB = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="worker nodes (default 2)")
    ap.add_argument("--cpus", type=int, default=1, help="CPUs per worker node (default 1)")
    ap.add_argument("--object-store-mb", type=int, default=200, help="object store per node, MB")
    args = ap.parse_args()
    try:
        from ray.cluster_utils import Cluster
    except ImportError:
        sys.exit("error: Ray is not installed: pip install 'novelfind[ray]'")
    store = args.object_store_mb * MB
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "object_store_memory": store, "include_dashboard": False},
    )
    try:
        for _ in range(args.workers):
            cluster.add_node(num_cpus=args.cpus, object_store_memory=store)
        cluster.wait_for_nodes()
        print(cluster.address, flush=True)
        print(f"{args.workers} worker nodes of {args.cpus} CPU; Ctrl-C stops them", file=sys.stderr)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
