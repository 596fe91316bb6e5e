"""DGL's side of ``bench_epoch.py --dgl``: DGL's DataLoader, its sampling and gather in line, a
GraphSAGE batch.

Runs in ``.venv-dgl`` (``make peers``: DGL 2.1.0, torch 2.1.2, NumPy 1), as a subprocess of
``experiments/bench_epoch.py``; it imports neither gns_jax nor JAX, and reads a folder written by
``gns-jax save`` with NumPy alone (``meta.json``, ``indptr.npy``, ``indices.npy``,
``features.npy``, ``labels.npy``; the layout of ``gns_jax/data/ondisk.py``). The stored CSR lists
every node's in-neighbours, which is DGL's CSC: the graph is built from it as stored.

The parent passes the seed batches (``--seeds``, an int ``[batches, batch_size]`` ``.npy``) and
the fan-outs output layer first, as gns-jax lists them; DGL lists them input layer first, so
``--fanouts 15,10,5`` is ``NeighborSampler([5, 10, 15])``. Timed, in this order:

* ``loader`` (the input side, as DGL's own examples run it: ``examples/pytorch/graphsage/
  node_classification.py``): the features and labels in ``g.ndata["feat"]`` and
  ``g.ndata["label"]``, ``NeighborSampler(fanouts, prefetch_node_feats=["feat"],
  prefetch_labels=["label"])`` and ``dgl.dataloading.DataLoader(g, seeds, sampler,
  batch_size=B, shuffle=False, drop_last=False, num_workers=0, device="cpu")`` over the seed
  batches concatenated, so that its batch ``i`` is ``seeds[i]`` (checked, untimed:
  ``loader_same_seeds``). A batch is timed from asking the iterator for it to having
  ``blocks[0].srcdata["feat"]`` and ``blocks[-1].dstdata["label"]`` in hand (an element of
  each read); the first two batches of a first iterator are a warm-up, then a fresh iterator's
  batches, all of them, are timed: mean and median ms per batch (``loader_ms``,
  ``loader_median_ms``), ``loader_batches_per_s`` (from the mean) and the input nodes per batch
  (``loader_input_nodes``);
* in line, on the graph without ``ndata`` (the secondary split): ``sample``,
  ``NeighborSampler(...).sample_blocks(g, seeds)``; ``gather``, ``x.index_select(0,
  input_nodes)`` and the seeds' labels (``sample_ms``, ``gather_ms``, ``input_ms``,
  ``input_batches_per_s``, ``input_nodes``: means);
* ``train`` (unless ``--no-train``; then its keys are null): the whole training batch (the
  in-line sample and gather, forward, backward, Adam) of a GraphSAGE of ``len(fanouts)``
  ``dgl.nn.SAGEConv(..., "mean")`` layers, ReLU between them.

The in-line and training phases each run two batches first as a warm-up (not timed), then every
batch. Prints one JSON object on stdout; notes go to stderr.

    .venv-dgl/bin/python experiments/dgl_side.py --dataset DIR --seeds SEEDS.npy \\
        --fanouts 15,10,5 --hidden 256 --threads 2 [--no-train]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

WARMUP = 2  # batches before the timed ones


def read_folder(folder: Path) -> dict:
    """The arrays of a ``gns-jax save`` folder, loaded into memory (as DGL users do)."""
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        raise SystemExit(f"{folder}: no meta.json; not a folder written by `gns-jax save`")
    meta = json.loads(meta_path.read_text())

    def load(name):
        return np.load(folder / f"{name}.npy", allow_pickle=False)

    return dict(
        meta=meta,
        indptr=load("indptr"),
        indices=load("indices"),
        features=np.asarray(load("features"), dtype=np.float32),
        labels=load("labels"),
    )


def sage(torch, dglnn, in_feats: int, hidden: int, classes: int, layers: int):
    """GraphSAGE as in DGL's example: ``layers`` mean-aggregator SAGEConvs, ReLU between."""

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            sizes = [in_feats] + [hidden] * (layers - 1) + [classes]
            self.layers = torch.nn.ModuleList(
                dglnn.SAGEConv(a, b, "mean") for a, b in zip(sizes[:-1], sizes[1:])
            )

        def forward(self, blocks, x):
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                h = layer(block, h)
                if i < len(self.layers) - 1:
                    h = torch.relu(h)
            return h

    return SAGE()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", type=Path, required=True, help="a `gns-jax save` folder")
    parser.add_argument("--seeds", type=Path, required=True, help="int [batches, batch] .npy")
    parser.add_argument(
        "--fanouts",
        type=lambda s: [int(v) for v in s.split(",")],
        required=True,
        help="output layer first, as gns-jax lists them",
    )
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument(
        "--no-train", action="store_true", help="time the input side only (no GraphSAGE batches)"
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("DGLBACKEND", "pytorch")  # no prompt, no ~/.dgl/config.json
    import torch

    torch.set_num_threads(args.threads)
    import dgl
    import dgl.nn as dglnn
    from dgl.dataloading import DataLoader, NeighborSampler

    dgl.utils.set_num_threads(args.threads)  # DGL's OpenMP sampling threads
    torch.manual_seed(args.seed)

    start = time.perf_counter()
    data = read_folder(args.dataset)
    meta = data["meta"]
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    n = int(meta["num_nodes"])
    indptr = torch.from_numpy(data["indptr"].astype(np.int64))
    indices = torch.from_numpy(data["indices"].astype(np.int64))
    no_ids = torch.tensor([], dtype=torch.int64)  # edge ids 0 .. E-1
    g = dgl.graph(("csc", (indptr, indices, no_ids)), num_nodes=n)
    g.create_formats_()
    graph_s = time.perf_counter() - start
    x = torch.from_numpy(data["features"])
    multilabel = bool(meta.get("multilabel", False))
    if multilabel:
        y = torch.from_numpy(np.maximum(data["labels"], 0).astype(np.float32))
        classes = y.shape[1]
        loss_fn = torch.nn.functional.binary_cross_entropy_with_logits
    else:
        y = torch.from_numpy(np.maximum(data["labels"], 0).astype(np.int64))
        classes = int(meta["num_classes"])
        loss_fn = torch.nn.functional.cross_entropy
    del data

    seeds = np.load(args.seeds, allow_pickle=False).astype(np.int64)
    batches = [torch.from_numpy(s) for s in seeds]
    fanouts = list(reversed(args.fanouts))  # DGL: input layer first

    # DGL's DataLoader, as its examples use it: features and labels in g.ndata, prefetched.
    g.ndata["feat"] = x
    g.ndata["label"] = y
    loader = DataLoader(
        g,
        torch.from_numpy(seeds.reshape(-1)),
        NeighborSampler(fanouts, prefetch_node_feats=["feat"], prefetch_labels=["label"]),
        batch_size=int(seeds.shape[1]),
        shuffle=False,
        drop_last=False,
        num_workers=0,
        device="cpu",
    )

    def touch(t):  # reads an element: the tensor is there
        return t.reshape(-1)[-1].item()

    it = iter(loader)
    for _ in range(min(WARMUP, len(batches))):
        _, _, blocks = next(it)
        touch(blocks[0].srcdata["feat"])
        touch(blocks[-1].dstdata["label"])
    del it
    loader_s, loader_inputs, same_seeds = [], [], True
    it = iter(loader)
    for s in batches:
        t0 = time.perf_counter()
        input_nodes, output_nodes, blocks = next(it)
        touch(blocks[0].srcdata["feat"])
        touch(blocks[-1].dstdata["label"])
        loader_s.append(time.perf_counter() - t0)
        loader_inputs.append(int(input_nodes.shape[0]))
        same_seeds = same_seeds and torch.equal(output_nodes, s)
    del it, loader, blocks
    g.ndata.pop("feat")  # the in-line split and the training batches run on the bare graph
    g.ndata.pop("label")

    sampler = NeighborSampler(fanouts)

    def sample_and_gather(s):
        t0 = time.perf_counter()
        input_nodes, output_nodes, blocks = sampler.sample_blocks(g, s)
        t1 = time.perf_counter()
        xs = x.index_select(0, input_nodes)
        ys = y.index_select(0, output_nodes)
        t2 = time.perf_counter()
        return blocks, xs, ys, t1 - t0, t2 - t1, int(input_nodes.shape[0])

    for s in batches[:WARMUP]:
        sample_and_gather(s)
    sample, gather, inputs = [], [], []
    for s in batches:
        _, _, _, ts, tg, k = sample_and_gather(s)
        sample.append(ts)
        gather.append(tg)
        inputs.append(k)

    train_batch_s = train_step_ms = None
    if not args.no_train:
        model = sage(torch, dglnn, x.shape[1], args.hidden, classes, len(args.fanouts))
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)

        def train(s):
            t0 = time.perf_counter()
            blocks, xs, ys, *_ = sample_and_gather(s)
            t1 = time.perf_counter()
            opt.zero_grad()
            loss = loss_fn(model(blocks, xs), ys)
            loss.backward()
            opt.step()
            t2 = time.perf_counter()
            return t2 - t0, t2 - t1

        for s in batches[:WARMUP]:
            train(s)
        train_s, step_s = zip(*(train(s) for s in batches))
        train_batch_s = float(np.mean(train_s))
        train_step_ms = 1e3 * float(np.mean(step_s))

    sample_ms = 1e3 * float(np.mean(sample))
    gather_ms = 1e3 * float(np.mean(gather))
    loader_ms = 1e3 * float(np.mean(loader_s))
    json.dump(
        dict(
            dgl=dgl.__version__,
            torch=torch.__version__,
            numpy=np.__version__,
            threads=torch.get_num_threads(),
            dgl_threads=dgl.utils.get_num_threads(),
            fanouts_dgl=fanouts,
            batches=len(batches),
            batch_size=int(seeds.shape[1]),
            read_s=read_s,
            graph_s=graph_s,
            loader_ms=loader_ms,
            loader_median_ms=1e3 * float(np.median(loader_s)),
            loader_batches_per_s=1e3 / loader_ms,
            loader_input_nodes=float(np.mean(loader_inputs)),
            loader_same_seeds=bool(same_seeds),
            input_nodes=float(np.mean(inputs)),
            sample_ms=sample_ms,
            gather_ms=gather_ms,
            input_ms=sample_ms + gather_ms,
            input_batches_per_s=1e3 / (sample_ms + gather_ms),
            train_batch_s=train_batch_s,
            train_step_ms=train_step_ms,
            peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        ),
        sys.stdout,
    )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
