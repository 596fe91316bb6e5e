"""Link prediction against PyG's ``LinkNeighborLoader``, side by side in one process.

One graph, one edge split, the same fan-outs, batch (positives a batch, one uniform negative
each), model width, optimiser and epochs on both sides (needs ``make peers``: run it with
``.venv-peers/bin/python``, which has PyTorch, PyG 2.8 with torch-sparse, and gns-jax).

* **The split.** :func:`gns_jax.links.random_edge_split` of the graph (``--edge-split``, seeded),
  written to an ``.npz`` that both sides read; ``--train-edges N`` keeps a seeded random ``N``
  of the training positives as the supervision edges (the rest stay in the message-passing
  graph), so that an epoch of a graph with millions of edges fits in minutes. Both sides pass
  messages over the graph without the validation and test edges in training, and score the test
  edges with the validation edges present.
* **Input side** (``input``): batches per second of each loader alone, in the caller's thread,
  over one epoch after a warm-up epoch, in ``--rounds`` interleaved rounds (medians): PyG's
  ``LinkNeighborLoader`` as its documentation uses it (``edge_label_index`` the training
  positives, ``neg_sampling_ratio=1``, ``shuffle=True``, ``num_workers=0``; a batch is its
  sampled subgraph with its features sliced), and gns-jax's link loader with NS and GNS
  (``--cache-fraction``, default 1 %) without a prefetch thread: sample, gather and put each
  batch's input on the device. PyG's loader keeps each batch's target edges in the graph it
  samples (its documentation removes them with ``RandomLinkSplit(disjoint_train_ratio=...)``,
  which sets edges aside for supervision only); ours removes them from each batch's blocks.
* **Training** (``train``): ``--epochs`` epochs of each, then the test edges scored with full
  neighbourhoods: ours is ``gns_jax.fit(task="link")`` with the command's defaults but for the
  options above (``eval_every`` = epochs: the final model is evaluated, as PyG's is); PyG's a
  ``torch_geometric.nn.GraphSAGE`` of the same widths with a dot-product decoder, binary
  cross-entropy, Adam at the same learning rate, evaluated on the whole graph at once (a
  ``SparseTensor`` adjacency). Both read the same feature matrix (the command's, row-normalised
  where it does that). Reported: seconds per epoch (median of the epochs after the first),
  test ROC-AUC, average precision, MRR and Hits@K against the split's ranking negatives (the
  same pairs for both), and for ours the feature rows moved host->device per batch.

    .venv-peers/bin/python -m experiments.bench_link --dataset facebook_pagepage --epochs 3 \\
        --out experiments/reports/bench-link/facebook_pagepage

Writes ``bench_link.json`` (after every round and every side trained: a rerun with the same
options, ``--rounds`` aside, goes on from there; ``--input-only`` first, then without it,
splits a long benchmark in two, and until a side has trained ``--epochs`` may change) and
``bench_link.md`` in ``--out``; prints the hardware. The committed report
(``experiments/reports/bench-link/``, one folder a graph) joins them in ``bench-link.md``
(:func:`combine`; ``python -m experiments.regenerate bench-link``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import types
from pathlib import Path

import jax
import numpy as np

from experiments.bench_epoch import threads
from experiments.grid import environment_line
from gns_jax import TrainConfig, fit
from gns_jax.data import load_dataset
from gns_jax.environment import environment
from gns_jax.factories import prepare_features
from gns_jax.linkeval import _metrics
from gns_jax.links import random_edge_split, remove_edges
from gns_jax.run import build_run

CONFIGS = ("NS", "GNS")
RESUMABLE = ("out", "input_only", "rounds")  # options a rerun may change: it goes on


def write_split(dataset, args, path: Path) -> dict:
    """The seeded split both sides read (``--train-edges``: a random subset of its training
    positives); its sizes."""
    fractions = tuple(float(x) for x in args.edge_split.split(","))
    split = random_edge_split(dataset.graph, fractions, args.seed, args.rank_negatives)
    train = split.train_pos
    if args.train_edges and args.train_edges < len(train):
        rng = np.random.default_rng([args.seed, 31])
        train = np.sort(rng.choice(len(train), args.train_edges, replace=False))
        train = split.train_pos[train]
    arrays = dict(
        train_pos=train,
        val_pos=split.val_pos,
        val_neg=split.val_neg,
        test_pos=split.test_pos,
        test_neg=split.test_neg,
        val_rank_neg=split.val_rank_neg,
        test_rank_neg=split.test_rank_neg,
    )
    np.savez(path, **arrays)
    return {k: int(len(v)) for k, v in arrays.items() if k.endswith(("_pos", "_neg"))}


def our_config(args, name: str, split_path: Path, **changes) -> TrainConfig:
    gns = dict(sampler="gns", cache_fraction=args.cache_fraction) if name == "GNS" else {}
    return TrainConfig(
        task="link",
        epochs=args.epochs,
        eval_every=args.epochs,
        batch_size=args.batch_size,
        fanouts=tuple(args.fanouts),
        hidden=args.hidden,
        lr=args.lr,
        seed=args.seed,
        edge_split=str(split_path),
        rank_negatives=args.rank_negatives,
        hits_k=args.hits_k,
        **(gns or dict(sampler="ns")),
    ).replace(**changes)


def our_input_rate(dataset, args, name: str, split_path: Path) -> dict:
    """Batches per second of our link loader alone (no prefetch thread, no step), over its
    second epoch (the first calibrates the budget, draws the cache and compiles)."""
    run = build_run(dataset, our_config(args, name, split_path, prefetch=0), evaluate_model=False)
    loader = run.loader
    for batch in loader.batches(0, 1):
        jax.block_until_ready(batch.inputs)
    count, moved = 0, 0
    start = time.perf_counter()
    for batch in loader.batches(1, 2):
        jax.block_until_ready(batch.inputs)
        count += 1
        moved += batch.rows_moved
    seconds = time.perf_counter() - start
    return dict(batches_per_s=count / seconds, rows_moved=moved / max(count, 1), batches=count)


def pyg_data(dataset, features: np.ndarray, split: dict):
    """The training graph (without validation and test edges) and the evaluation graph (with
    the validation edges) as PyG ``Data``, over the same feature matrix."""
    import torch
    from torch_geometric.data import Data

    held = np.concatenate([split["val_pos"], split["test_pos"]])
    senders, receivers = remove_edges(dataset.graph, held).edges()  # both directions
    n = dataset.num_nodes
    train_ei = np.stack([senders, receivers]).astype(np.int64)
    val = split["val_pos"].T.astype(np.int64)
    eval_ei = np.concatenate([train_ei, val, val[::-1]], axis=1)
    x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
    return (Data(x=x, edge_index=torch.from_numpy(train_ei), num_nodes=n),
            Data(x=x, edge_index=torch.from_numpy(eval_ei), num_nodes=n))  # fmt: skip


def pyg_loader(train_data, split: dict, args, seed: int):
    import torch
    from torch_geometric.loader import LinkNeighborLoader

    torch.manual_seed(seed)
    return LinkNeighborLoader(
        train_data,
        num_neighbors=list(args.fanouts),  # hops from the seeds outwards, as ours
        edge_label_index=torch.from_numpy(split["train_pos"].T.astype(np.int64)),
        neg_sampling_ratio=1.0,
        batch_size=args.batch_size,
        shuffle=True,
    )


def pyg_input_rate(loader) -> dict:
    for _ in loader:  # a warm-up epoch
        pass
    count = 0
    start = time.perf_counter()
    for _ in loader:
        count += 1
    return dict(batches_per_s=count / (time.perf_counter() - start), batches=count)


def link_metrics(pos: np.ndarray, neg: np.ndarray, ranked: np.ndarray, k: int) -> dict:
    """The metrics of ``gns_jax.linkeval`` from logits (its own function): the test positives,
    negatives and each positive's ranking negatives."""
    out = _metrics(pos, neg, ranked, types.SimpleNamespace(hits_k=k))  # it reads only hits_k
    return {f"test_{name}": value for name, value in out.items() if name != "accuracy"}


def pyg_train(train_data, eval_data, split: dict, args) -> dict:
    """PyG GraphSAGE + dot decoder, trained ``--epochs`` on its loader, then the test edges
    scored from full-graph embeddings of the evaluation graph."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE
    from torch_sparse import SparseTensor

    torch.manual_seed(args.seed)
    model = GraphSAGE(train_data.num_features, args.hidden, num_layers=len(args.fanouts),
                      dropout=0.5)  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loader = pyg_loader(train_data, split, args, args.seed + 1)
    times = []
    for _ in range(args.epochs):
        model.train()
        start = time.perf_counter()
        for batch in loader:
            opt.zero_grad()
            z = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            logits = (z[src] * z[dst]).sum(-1)
            loss = F.binary_cross_entropy_with_logits(logits, batch.edge_label)
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - start)
    model.eval()
    start = time.perf_counter()
    with torch.no_grad():
        ei = eval_data.edge_index
        n = eval_data.num_nodes
        adj = SparseTensor(row=ei[1], col=ei[0], sparse_sizes=(n, n))  # rows: receivers
        z = model(eval_data.x, adj)

        def score(pairs):
            pairs = torch.from_numpy(np.asarray(pairs, np.int64))
            return (z[pairs[..., 0]] * z[pairs[..., 1]]).sum(-1).numpy()

        pos, neg = score(split["test_pos"]), score(split["test_neg"])
        heads = np.repeat(split["test_pos"][:, :1], split["test_rank_neg"].shape[1], axis=1)
        ranked = score(np.stack([heads, split["test_rank_neg"]], -1))
    return dict(
        epoch_s=float(np.median(times[1:] if len(times) > 1 else times)),
        epoch_times_s=times,
        eval_s=time.perf_counter() - start,
        **link_metrics(pos, neg, ranked, args.hits_k),
    )


def our_train(dataset, args, name: str, split_path: Path) -> dict:
    result = fit(dataset, our_config(args, name, split_path), quiet=True)
    m = result.metrics
    epochs = [e["time_s"] for e in m["epochs"] if "time_s" in e]
    keys = ("test_roc_auc", "test_average_precision", "test_mrr", f"test_hits@{args.hits_k}")
    return dict(
        epoch_s=float(np.median(epochs[1:])) if len(epochs) > 1 else m["epoch_time_s"],
        epoch_time_s=m["epoch_time_s"],
        h2d_rows_per_batch=m["h2d_rows_per_batch"],
        input_nodes_per_batch=m["input_nodes_per_batch"],
        time_split_s=m["time_split_s"],
        cache_fraction=m.get("cache_fraction"),
        **{k: m[k] for k in keys},
    )


def median_rates(rounds: list[dict], name: str) -> float:
    return float(np.median([r[name]["batches_per_s"] for r in rounds]))


def report(result: dict) -> str:
    a = result["args"]
    k = a["hits_k"]
    lines = [
        f"# Link prediction: gns-jax against PyG's LinkNeighborLoader on {result['dataset']}",
        "",
        f"{result['num_nodes']:,} nodes, {result['num_edges']:,} stored edges; split "
        f"{a['edge_split']} (seed {a['seed']}): {result['split']['train_pos']:,} training "
        f"positives, {result['split']['test_pos']:,} test positives and as many negatives; "
        f"fan-outs {','.join(map(str, a['fanouts']))}, {a['batch_size']} positives a batch with "
        f"one uniform negative each, hidden {a['hidden']}, Adam {a['lr']}, {a['epochs']} "
        f"epoch{'s' * (a['epochs'] != 1)}; "
        f"GNS cache {a['cache_fraction']}.",
        "",
        f"## Input side, batches per second (median of {len(result['input'])} interleaved rounds)",
        "",
        "| loader | batches/s | vs PyG | vs PyG, each round | rows host->device a batch |",
        "|---|---|---|---|---|",
    ]
    pyg = median_rates(result["input"], "PyG")
    lines.append(f"| PyG LinkNeighborLoader | {pyg:.2f} | 1.00 | - | - |")
    for name in CONFIGS:
        rate = median_rates(result["input"], name)
        rounds = ", ".join(f"{r[name]['batches_per_s'] / r['PyG']['batches_per_s']:.2f}"
                           for r in result["input"])  # fmt: skip
        rows = np.median([r[name]["rows_moved"] for r in result["input"]])
        lines.append(f"| gns-jax {name} | {rate:.2f} | {rate / pyg:.2f} | {rounds} | {rows:,.0f} |")
    lines += [
        "",
        "PyG samples with torch-sparse (it warns that it prefers pyg-lib, whose wheels are not "
        "on PyPI), and keeps each batch's target edges in the graph it samples from; gns-jax "
        "removes them (and their reverses) from the batch's message passing.",
    ]
    if "train" in result:
        lines += [
            "",
            "## Training and test metrics (the final model; full neighbourhoods)",
            "",
            f"| side | seconds an epoch | test ROC-AUC | AP | MRR | Hits@{k} | rows a batch |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in result["train"].items():
            rows = r.get("h2d_rows_per_batch")
            lines.append(
                f"| {name} | {r['epoch_s']:.2f} | {100 * r['test_roc_auc']:.2f} | "
                f"{100 * r['test_average_precision']:.2f} | {100 * r['test_mrr']:.2f} | "
                f"{100 * r[f'test_hits@{k}']:.2f} | "
                + ("-" if rows is None else f"{rows:,.0f}")
                + " |"
            )
    lines += ["", result["environment"]]
    return "\n".join(lines) + "\n"


def combine(folder: Path) -> str:
    """``folder/bench-link.md``: the reports of every ``folder/*/bench_link.json``."""
    texts = [report(json.loads(p.read_text())) for p in sorted(folder.glob("*/bench_link.json"))]
    text = "\n".join(texts)
    (folder / "bench-link.md").write_text(text)
    return text


def environment_text(torch_version: str, pyg_version: str) -> str:
    """Hardware, versions and commit, with the peers' versions and threads."""
    line = environment_line([{"environment": environment()}])
    return (
        f"{line[:-1]}; torch {torch_version} and torch_geometric {pyg_version} on "
        f"{threads()} threads."
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fanouts", type=lambda s: [int(x) for x in s.split(",")],
                        default=[15, 10, 5])  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--edge-split", default="0.85,0.05,0.10")
    parser.add_argument("--train-edges", type=int, default=None)
    parser.add_argument("--cache-fraction", type=float, default=0.01)
    parser.add_argument("--rank-negatives", type=int, default=100)
    parser.add_argument("--hits-k", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--input-only", action="store_true", help="no training comparison")
    args = parser.parse_args(argv)
    try:
        import torch
        import torch_geometric
        import torch_sparse  # noqa: F401  (PyG's neighbour sampling needs it or pyg-lib)
    except ImportError as error:
        parser.error(f"{error}: run this with .venv-peers/bin/python (make peers)")
    torch.set_num_threads(threads())  # as many threads as JAX's CPU backend has cores
    dataset = load_dataset(args.dataset)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "bench_link.json"
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    options["dataset"] = dataset.name  # a saved folder: its dataset, not where it lies
    result = dict(
        dataset=dataset.name,
        num_nodes=dataset.num_nodes,
        num_edges=int(dataset.graph.num_edges),
        args=options,
        input=[],
        environment=environment_text(torch.__version__, torch_geometric.__version__),
    )
    if path.exists():  # resume: the rounds and sides measured so far, if the options match
        saved = json.loads(path.read_text())
        free = RESUMABLE + (() if "train" in saved else ("epochs",))  # input: any epochs
        differ = [k for k in options if k not in free and saved["args"].get(k) != options[k]]
        if differ:
            parser.error(f"{path} holds a run with other {', '.join(differ)}: use another --out")
        result |= {k: saved[k] for k in ("input", "train") if k in saved}
        result["args"] = options

    def save():
        path.write_text(json.dumps(result, indent=1, default=float))

    with tempfile.TemporaryDirectory() as tmp:
        split_path = Path(tmp) / "split.npz"
        result["split"] = write_split(dataset, args, split_path)
        with np.load(split_path) as z:
            split = {key: z[key] for key in z.files}
        features = prepare_features(dataset, our_config(args, "NS", split_path))
        train_data, eval_data = pyg_data(dataset, features, split)
        for i in range(len(result["input"]), args.rounds):
            row = {"PyG": pyg_input_rate(pyg_loader(train_data, split, args, args.seed + i))}
            for name in CONFIGS:
                row[name] = our_input_rate(dataset, args, name, split_path)
            result["input"].append(row)
            save()
            print(f"round {i + 1}: " + ", ".join(f"{k} {v['batches_per_s']:.2f} batches/s"
                                                 for k, v in row.items()),  # fmt: skip
                  file=sys.stderr, flush=True)  # fmt: skip
        if not args.input_only:
            train = result.setdefault("train", {})
            for name in ("PyG", *(f"gns-jax {c}" for c in CONFIGS)):
                if name in train:
                    continue
                if name == "PyG":
                    train[name] = pyg_train(train_data, eval_data, split, args)
                else:
                    train[name] = our_train(dataset, args, name.split()[-1], split_path)
                save()
                print(f"{name} trained: test ROC-AUC {train[name]['test_roc_auc']:.4f}",
                      file=sys.stderr, flush=True)  # fmt: skip
    save()
    text = report(result)
    (args.out / "bench_link.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
