"""The styles of the experiments' figures: distinct colours, one style per series, legends.

* :func:`colors` / :func:`styles`: ``n`` visually distinct colours (matplotlib's ``tab10``, then
  ten more chosen to be as far from those, from black, from white and from one another in CIELAB
  as ``tab10``'s own closest pair); beyond 20, colours repeat with another line style, and every
  series has its own marker, so that no two of the first 180 look alike.
* :class:`Palette`: a series' name -> its :class:`Style`, the same in every figure drawn with one
  palette (build it from every name of a report), baselines (NS) in black.
* :func:`legend`, :func:`figure_legend`: legends at matplotlib's normal size, inside the axes for
  a few entries, outside (to the right, or below every panel) for many.
* :func:`hbars`: horizontal bars on a linear axis with their values written beside them, or
  points on a log axis where the values span orders of magnitude (a bar's length from zero means
  nothing on a log axis); :func:`scale_for`: a log axis only where the values need one.
* :func:`save_png`: a figure as a palette PNG (a few dozen colours are all a line plot has),
  about a third of matplotlib's own file, so that committed figures keep the repository small.

matplotlib is imported inside the functions that draw: ``gns_jax`` imports without it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

__all__ = [
    "BASELINE",
    "PALETTE",
    "Palette",
    "Style",
    "colors",
    "figure_legend",
    "hbars",
    "legend",
    "legend_columns",
    "save_png",
    "scale_for",
    "style",
    "styles",
]

# matplotlib's tab10, then ten more: at least as far apart (CIELAB delta E 1976, 26.8) from tab10,
# from black and white and from one another as tab10's own closest pair (purple and pink, 27.7),
# and none too light to see on white.
PALETTE = (
    "#1f77b4",  # blue
    "#ff7f0e",  # orange
    "#2ca02c",  # green
    "#d62728",  # red
    "#9467bd",  # purple
    "#8c564b",  # brown
    "#e377c2",  # pink
    "#7f7f7f",  # grey
    "#bcbd22",  # olive
    "#17becf",  # cyan
    "#0000ff",  # pure blue
    "#800000",  # maroon
    "#00857a",  # teal
    "#00d9a3",  # mint
    "#80d926",  # lime
    "#c71585",  # magenta
    "#004d00",  # dark green
    "#ff9980",  # salmon
    "#7b68ee",  # slate blue
    "#5c3d00",  # dark brown
)
BASELINE = "#000000"  # the reference series (NS): black, drawn thicker
LINESTYLES = ("-", "--", "-.", ":")  # one per round of the palette
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")  # 9, prime to 20: (colour, marker) pairs
# differ for the first 180 series


@dataclasses.dataclass(frozen=True)
class Style:
    """How one series is drawn: :meth:`line` and :meth:`points` give matplotlib's keywords."""

    color: str
    linestyle: str = "-"
    marker: str = "o"
    linewidth: float = 1.5

    def line(self, points: int | None = None) -> dict:
        """Keywords of ``ax.plot`` for a line of ``points`` points: about eight markers on it,
        starting at an offset that differs with the marker, so that series' markers do not all
        fall on the same x."""
        every = max(1, points // 8) if points else 1
        start = every * MARKERS.index(self.marker) // len(MARKERS) if self.marker in MARKERS else 0
        return {
            "color": self.color,
            "linestyle": self.linestyle,
            "linewidth": self.linewidth,
            "marker": self.marker,
            "markevery": (start, every),
            "markersize": 4,
        }

    def points(self) -> dict:
        """Keywords of ``ax.scatter``."""
        return {"color": self.color, "marker": self.marker}


def style(i: int) -> Style:
    """The ``i``-th series' style; the first ``n`` of :func:`styles` for every ``n``."""
    if i < 0:
        raise ValueError(f"style index {i} is negative")
    linestyle = LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)]
    return Style(PALETTE[i % len(PALETTE)], linestyle, MARKERS[i % len(MARKERS)])


def styles(n: int) -> list[Style]:
    """``n`` styles, no two alike: distinct colours up to 20, then line styles too."""
    return [style(i) for i in range(n)]


def colors(n: int) -> list[str]:
    """``n`` colours (hex), distinct for ``n`` up to 20 (they repeat beyond: use :func:`styles`)."""
    return [s.color for s in styles(n)]


class Palette:
    """A series' name -> its :class:`Style`, the same in every figure drawn with this palette.

    ``names`` take styles in their order (give every name of a report, in the report's order, so
    that a series missing from one figure does not shift the others); a name not given takes the
    next free style when first asked for. ``baselines`` (e.g. ``"NS"``) are black and thicker.
    """

    def __init__(self, names: Iterable[str] = (), *, baselines: Iterable[str] = ()):
        self._baselines = {
            name: Style(BASELINE, "-", MARKERS[0], linewidth=2.5) for name in baselines
        }
        self._styles: dict[str, Style] = {}
        for name in names:
            self[name]

    def __getitem__(self, name: str) -> Style:
        if name in self._baselines:
            return self._baselines[name]
        if name not in self._styles:
            self._styles[name] = style(len(self._styles))
        return self._styles[name]

    def __contains__(self, name: object) -> bool:
        return name in self._baselines or name in self._styles

    def __len__(self) -> int:
        return len(self._styles) + len(self._baselines)

    def names(self) -> list[str]:
        return [*self._baselines, *self._styles]


def legend(ax, *, inside: int = 6, **kwargs):
    """``ax``'s legend at the normal font size: inside the axes (``loc="best"``) for up to
    ``inside`` entries, else to the right of the axes, in columns of at most 18."""
    handles, labels = ax.get_legend_handles_labels()
    if not labels:
        return None
    if len(labels) <= inside:
        return ax.legend(handles, labels, **kwargs)
    options = {
        "loc": "upper left",
        "bbox_to_anchor": (1.02, 1.0),
        "borderaxespad": 0.0,
        "ncol": math.ceil(len(labels) / 18),
    }
    return ax.legend(handles, labels, **(options | kwargs))


def figure_legend(fig, *, ncol: int | None = None, **kwargs):
    """One legend below every panel of ``fig`` for the series of all its axes (each label once),
    at the normal font size, in as many columns as the figure's width holds. Switches ``fig`` to
    matplotlib's constrained layout, which makes room for it."""
    handles, labels = [], []
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels and not label.startswith("_"):
                handles.append(handle)
                labels.append(label)
    if not labels:
        return None
    if ncol is None:
        ncol = legend_columns(labels, fig.get_figwidth())
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        fig.set_layout_engine("constrained")
    return fig.legend(handles, labels, loc="outside lower center", ncol=ncol, **kwargs)


def legend_columns(labels: Sequence[str], width_in: float, fontsize_pt: float = 10.0) -> int:
    """How many legend entries of ``labels`` fit side by side in ``width_in`` inches: an entry is
    its text (about 0.6 em a character) and its handle and padding (about 4 em)."""
    em = fontsize_pt / 72.0
    entry = (0.6 * max(len(label) for label in labels) + 4.0) * em
    return max(1, min(len(labels), int(0.95 * width_in / entry)))


def scale_for(ax, values, axis: str = "x", *, span: float = 10.0) -> str:
    """A log scale on ``ax``'s ``axis`` where the positive ``values`` span more than ``span``
    times, else linear; returns the scale set."""
    finite = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    scale = "log" if finite and max(finite) > span * min(finite) else "linear"
    (ax.set_xscale if axis == "x" else ax.set_yscale)(scale)
    return scale


def hbars(
    ax,
    labels: Sequence[str],
    values: Sequence[float],
    colors: Sequence[str],
    *,
    span: float = 30.0,
    fmt: str = "{:,.0f}",
) -> str:
    """One horizontal bar per label, top to bottom in ``labels``' order, on a linear axis from
    zero, each value written at its bar's end. Where the values span more than ``span`` times, a
    point per label on a log axis instead (a dotted guide from each label), written likewise.
    Returns ``"bars"`` or ``"points"``."""
    y = list(range(len(labels)))[::-1]
    finite = [v for v in values if math.isfinite(v) and v > 0]
    wide = bool(finite) and max(finite) > span * min(finite)
    if wide:
        ax.scatter(values, y, color=list(colors), s=40, zorder=3)
        ax.grid(axis="y", linestyle=":", linewidth=0.8)  # a guide from each label, no length
        ax.set_xscale("log")
        ax.set_xlim(min(finite) / 2, max(finite) * 6)
    else:
        ax.barh(y, values, color=list(colors))
        ax.set_xlim(0, 1.25 * max(finite, default=1.0))
    for yi, v in zip(y, values):
        if math.isfinite(v):
            ax.annotate(
                fmt.format(v),
                (v, yi),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
            )
    ax.set_yticks(y, labels)
    ax.set_ylim(-0.6, len(labels) - 0.4)
    return "points" if wide else "bars"


def save_png(fig, path, *, dpi: int = 100, colors: int = 64) -> None:
    """Writes ``fig`` to ``path`` as a PNG of at most ``colors`` palette colours (median cut,
    deterministic), optimised: the figure as matplotlib draws it, in about a third of the bytes."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT).save(
            path, format="PNG", optimize=True
        )
