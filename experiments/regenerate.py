"""Rebuilds a committed report's tables and plots from its archive of runs.

Every report in ``experiments/reports/NAME/`` keeps its markdown table, the plots the READMEs
cite (``figures/``) and one archive, ``runs.tar.xz``, of its raw run files: every run's JSON
(``runs/*.json``), logs, and the measurements' JSON. This command unpacks the archive into a
temporary folder, runs the script's own aggregation there (``--table-only`` for the grids of
``estimators.py`` and ``compare.py``, :func:`experiments.beyond_memory.report` for
``beyond-memory``) and copies the tables and plots back:

    python -m experiments.regenerate estimators-real        # one report, several, or --all
    python -m experiments.regenerate compare-real --out DIR  # written to DIR instead
    python -m experiments.regenerate --list

The last line of a grid's table names the commit that wrote the table (the runs do not record
theirs), so a regenerated table differs from the committed one in that line at least.

To add runs to a report: ``--unpack NAME`` extracts its archive into its folder (git ignores the
unpacked files), the report's command (``experiments/README.md``) with ``--out
experiments/reports/NAME`` then resumes its grid (a completed run is not run again), and
``--pack NAME`` writes the archive again from the unpacked files.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

REPORTS_DIR = Path(__file__).resolve().parent / "reports"
ARCHIVE = "runs.tar.xz"


@dataclasses.dataclass(frozen=True)
class Report:
    """How one report is rebuilt: ``rebuild(folder)`` writes ``outputs`` (files, or folders of
    plots) into ``folder``, which holds the unpacked archive; ``None`` where it cannot be."""

    outputs: tuple[str, ...]
    rebuild: Callable[[Path], None] | None
    why_not: str = ""


def _grid(module: str, options: list[str], after: tuple[str, ...] = ()) -> Callable[[Path], None]:
    """The ``--table-only`` aggregation of ``experiments.<module>`` over a folder: ``options``
    are the report's command's (they name its runs), ``after`` what follows its ``--``."""

    def rebuild(folder: Path) -> None:
        main = __import__(f"experiments.{module}", fromlist=["main"]).main
        argv = [*options, "--out", str(folder), "--table-only"]
        if after:
            argv += ["--", *after]
        with contextlib.redirect_stdout(io.StringIO()):  # the script prints its table
            code = main(argv)
        if code != 0:
            raise RuntimeError(f"experiments.{module} {' '.join(argv)}: exit status {code}")

    return rebuild


def _beyond_memory(folder: Path) -> None:
    from experiments.beyond_memory import report

    saved = json.loads((folder / "beyond-memory.json").read_text())
    text = report(saved["meta"], saved["disk"], saved["rows"], saved["files"])
    (folder / "beyond-memory.md").write_text(text)


def _bench_dgl(folder: Path) -> None:
    from experiments.bench_epoch import markdown

    saved = json.loads((folder / "bench_epoch.json").read_text())
    (folder / "bench_epoch.md").write_text(markdown(saved))


def _link_study(folder: Path) -> None:
    from experiments.link_study import table

    (folder / "link-study.md").write_text(table(folder))


def _bench_link(folder: Path) -> None:
    from experiments.bench_link import combine

    combine(folder)


def _size_study(folder: Path) -> None:
    from experiments.size_report import report

    report(folder)


BENCH_GRAPHS = ("cora", "amazon_photo")  # experiments.bench_pipeline's defaults
SYNTHETIC_200K = "synthetic:nodes=200000,degree=20,features=100,classes=20,signal=0.1"

REPORTS: dict[str, Report] = {
    "estimators-real": Report(
        ("estimators.md", "figures"), _grid("estimators", ["--grid", "real"])
    ),
    "estimators-products": Report(
        ("estimators.md", "figures"),
        _grid("estimators", ["--grid", "products", "--dataset", "DIR"]),  # DIR: not read
    ),
    "compare-real": Report(
        ("compare.md", "figures"),
        _grid(
            "compare", ["--datasets", "cora", "citeseer", "amazon_photo", "--seeds", "0", "1", "2"]
        ),
    ),
    "compare-synthetic": Report(
        ("compare.md", "figures"),
        _grid("compare", ["--datasets", SYNTHETIC_200K, "--seeds", "0"], ("--epochs", "3")),
    ),
    "ablations": Report(
        ("compare.md", "figures"),
        _grid("compare", ["--ablations", "--datasets", "amazon_photo", "--seeds", "0"]),
    ),
    "beyond-memory": Report(("beyond-memory.md",), _beyond_memory),
    "bench-dgl": Report(("bench_epoch.md",), _bench_dgl),
    "bench-pipeline": Report(
        ("bench_pipeline.md", "figures"), _grid("bench_pipeline", ["--graphs", *BENCH_GRAPHS])
    ),
    "plan": Report(("plan.md", "plan.png"), _grid("plan", ["--seeds", "4", "5", "6", "7"])),
    "bench-parallel": Report(
        ("bench_parallel.md",),
        None,
        "bench_parallel.py writes its table only as it runs; its saved bench_parallel.json is "
        "in the archive",
    ),
    "size-study": Report(("size-study.md", "size-study.json", "figures"), _size_study),
    "link-study": Report(("link-study.md",), _link_study),
    "bench-link": Report(("bench-link.md",), _bench_link),
    "disk": Report(
        ("disk.md",),
        None,
        "its disk.json predates the advised-random phase that bench_disk.report now expects; "
        "the table is the one its run wrote",
    ),
}


def _is_output(path: Path, folder: Path, report: Report) -> bool:
    top = path.relative_to(folder).parts[0]
    return top in report.outputs or top == ARCHIVE


def unpack(archive: Path, folder: Path) -> list[str]:
    """Extracts ``archive`` into ``folder`` (plain files and folders only); the member names."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for m in members:
            target = (folder / m.name).resolve()
            if not (m.isfile() or m.isdir()) or not target.is_relative_to(folder.resolve()):
                raise ValueError(f"{archive}: {m.name} is not a plain file inside the archive")
        tar.extractall(folder, members=members, **_data_filter())
    return [m.name for m in members if m.isfile()]


def _data_filter() -> dict:
    return {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def _is_lock(path: Path) -> bool:
    """A run's output lock (``.NAME.lock``, gns_jax/runlock.py): not a run file."""
    return path.name.startswith(".") and path.name.endswith(".lock")


def pack(folder: Path, report: Report, archive: Path | None = None) -> list[str]:
    """Writes ``folder``'s raw files (everything but the report's outputs and the archive) to
    ``archive`` (default ``folder/runs.tar.xz``), sorted, owner-free; the member names."""
    from experiments.grid import CHECKPOINTS

    archive = archive or folder / ARCHIVE
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and not _is_output(p, folder, report)
        and not _is_lock(p)
        and p.relative_to(folder).parts[0] != CHECKPOINTS  # a resumable grid's, in progress
    )
    if not files:
        raise ValueError(f"{folder}: no raw run files to pack (unpack the archive first?)")

    def owner_free(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:xz", preset=9) as tar:
        for path in files:
            tar.add(path, arcname=path.relative_to(folder).as_posix(), filter=owner_free)
    partial.replace(archive)
    return [p.relative_to(folder).as_posix() for p in files]


def regenerate(name: str, archive: Path | None = None, out: Path | None = None) -> list[Path]:
    """Rebuilds report ``name``'s outputs from ``archive`` (default its ``runs.tar.xz``) into
    ``out`` (default the report's folder); the files written."""
    report = REPORTS[name]
    if report.rebuild is None:
        raise ValueError(f"{name}: not rebuilt from its archive: {report.why_not}")
    archive = archive or REPORTS_DIR / name / ARCHIVE
    out = out or REPORTS_DIR / name
    written = []
    with tempfile.TemporaryDirectory(prefix=f"report-{name}-") as tmp:
        folder = Path(tmp)
        unpack(archive, folder)
        report.rebuild(folder)
        out.mkdir(parents=True, exist_ok=True)
        for output in report.outputs:
            source = folder / output
            if source.is_dir():
                for path in sorted(source.rglob("*")):
                    if path.is_file():
                        target = out / path.relative_to(folder)
                        target.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(path, target)
                        written.append(target)
            elif source.is_file():
                shutil.copyfile(source, out / output)
                written.append(out / output)
            else:
                raise RuntimeError(f"{name}: the rebuild wrote no {output}")
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(REPORTS)}")
    parser.add_argument("--all", action="store_true", help="every report that can be rebuilt")
    parser.add_argument("--list", action="store_true", help="the reports and what each rebuilds")
    parser.add_argument("--out", type=Path, help="write the tables and plots here instead")
    parser.add_argument("--archive", type=Path, help="read this archive instead (one NAME)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--unpack", action="store_true", help="extract NAME's archive in place")
    mode.add_argument("--pack", action="store_true", help="write NAME's archive from its files")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in REPORTS]
    if unknown:
        parser.error(f"no report {', '.join(unknown)} (of {', '.join(REPORTS)})")
    if args.list:
        for name, report in REPORTS.items():
            what = ", ".join(report.outputs) if report.rebuild else f"nothing: {report.why_not}"
            print(f"{name}: {what}")
        return 0
    if args.all:  # every report's archive, but only the reports that can be rebuilt
        names = [n for n, r in REPORTS.items() if r.rebuild or args.unpack or args.pack]
    else:
        names = args.names
    if not names:
        parser.error("name a report (or --all, --list)")
    if (args.archive or args.out) and len(names) != 1:
        parser.error("--archive and --out take one report")
    for name in names:
        folder = REPORTS_DIR / name
        if args.unpack:
            files = unpack(args.archive or folder / ARCHIVE, folder)
            print(f"{name}: unpacked {len(files)} files into {folder}")
            continue
        if args.pack:
            try:
                files = pack(folder, REPORTS[name], args.archive)
            except ValueError as e:
                parser.error(str(e))
            print(f"{name}: packed {len(files)} files into {args.archive or folder / ARCHIVE}")
            continue
        try:
            written = regenerate(name, args.archive, args.out)
        except (ValueError, OSError, tarfile.TarError) as e:
            print(e, file=sys.stderr)
            return 1
        print(f"{name}: wrote {len(written)} files in {args.out or folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
