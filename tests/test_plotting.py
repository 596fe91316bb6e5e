"""gns_jax.plotting: distinct colours and styles, one style per series name, readable legends."""

import itertools
import subprocess
import sys

import numpy as np
import pytest

from gns_jax import plotting


def lab(hex_color: str) -> np.ndarray:
    """CIELAB (D65) of an sRGB hex colour, computed here independently of the module."""
    rgb = np.array([int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = m @ lin / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a: str, b: str) -> float:
    return float(np.linalg.norm(lab(a) - lab(b)))


@pytest.mark.parametrize("n", [1, 2, 5, 10, 11, 15, 20])
def test_colours_are_visually_distinct_up_to_20(n):
    colours = plotting.colors(n)
    assert len(colours) == n
    assert len(set(colours)) == n
    if n > 1:  # CIELAB distance of the closest pair: tab10's own closest pair is 27.7
        closest = min(delta_e(a, b) for a, b in itertools.combinations(colours, 2))
        assert closest > 25, closest
    for c in colours:  # visible on white, and unlike the baseline's black
        assert delta_e(c, "#ffffff") > 40 and delta_e(c, plotting.BASELINE) > 40
        assert lab(c)[0] < 80  # not too light to see on white


def test_the_first_ten_are_matplotlibs_default_cycle_and_prefixes_agree():
    pytest.importorskip("matplotlib")
    import matplotlib as mpl
    from matplotlib.colors import to_hex

    default = [to_hex(c) for c in mpl.rcParamsDefault["axes.prop_cycle"].by_key()["color"]]
    assert plotting.colors(10) == default
    assert plotting.colors(20)[:13] == plotting.colors(13)
    assert plotting.styles(50)[:21] == plotting.styles(21)


def test_styles_stay_distinguishable_beyond_the_palette():
    many = plotting.styles(180)
    assert len({(s.color, s.linestyle, s.marker) for s in many}) == 180
    assert len({(s.color, s.marker) for s in many}) == 180  # even as scatter points
    assert len({(s.color, s.linestyle) for s in many[:80]}) == 80  # even as lines
    assert {s.linestyle for s in many[:20]} == {"-"}  # plain lines while colours suffice
    with pytest.raises(ValueError):
        plotting.style(-1)


def test_a_palette_gives_a_name_the_same_style_in_every_figure():
    names = ["ht 1%", "ht 5%", "hajek 1%", "hajek 5%", "clipped 1%", "exact 1%"]
    palette = plotting.Palette(names, baselines=["ns"])
    # a figure with a subset, in another order, still draws each name as every other figure does
    first = {name: palette[name] for name in names}
    second = {name: palette[name] for name in reversed(names[2:])}
    assert all(second[name] == first[name] for name in second)
    assert len({s.color for s in first.values()}) == len(names)
    # the order given decides, not the order asked in
    assert plotting.Palette(names)["hajek 5%"] == plotting.style(3)
    assert plotting.Palette(names)["hajek 5%"] != plotting.Palette(names[::-1])["hajek 5%"]
    # baselines are black and thicker, and take no palette colour
    assert palette["ns"].color == plotting.BASELINE
    assert palette["ns"].linewidth > palette["ht 1%"].linewidth
    assert palette["ht 1%"] == plotting.style(0)
    # a name not given takes the next free style, then keeps it
    new = palette["minimum 1%"]
    assert new == plotting.style(len(names)) and palette["minimum 1%"] == new
    assert new.color not in {s.color for s in first.values()}
    assert "minimum 1%" in palette and "other" not in palette
    assert palette.names()[0] == "ns" and len(palette) == len(names) + 2


def test_line_and_point_keywords():
    s = plotting.style(3)
    kw = s.line(150)
    assert kw["color"] == s.color and kw["linestyle"] == s.linestyle
    assert kw["marker"] == s.marker and kw["markevery"][1] == 18  # about eight markers
    starts = {plotting.style(i).line(150)["markevery"][0] for i in range(9)}
    assert len(starts) == 9 and all(0 <= x < 18 for x in starts)  # staggered along the x axis
    assert s.line()["markevery"] == (0, 1)
    assert s.points() == {"color": s.color, "marker": s.marker}


def test_the_module_imports_without_matplotlib():
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "import gns_jax, gns_jax.plotting as p\n"
        "assert len(set(p.colors(20))) == 20 and p.Palette(['a'])['a'] == p.style(0)\n"
        "assert 'matplotlib' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def plt():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        matplotlib.use("Agg")
        yield plt
    plt.close("all")


def _bbox(artist, fig, tight=False):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return artist.get_tightbbox(renderer) if tight else artist.get_window_extent(renderer)


def test_a_few_entries_go_inside_the_axes_at_the_normal_size(plt):
    fig, ax = plt.subplots()
    palette = plotting.Palette(["a", "b", "c"], baselines=["ns"])
    for i, name in enumerate(palette.names()):
        ax.plot([0, 1], [i, i + 1], label=name, **palette[name].line(2))
    leg = plotting.legend(ax)
    assert [t.get_text() for t in leg.get_texts()] == ["ns", "a", "b", "c"]
    assert {t.get_fontsize() for t in leg.get_texts()} == {10.0}  # matplotlib's default
    legend_box, axes_box = _bbox(leg, fig), _bbox(ax, fig)
    assert axes_box.x0 <= legend_box.x0 and legend_box.x1 <= axes_box.x1


def test_many_entries_go_outside_the_axes(plt):
    fig, ax = plt.subplots(layout="constrained")
    for i in range(14):
        ax.plot([0, 1], [i, i], label=f"series {i}", **plotting.style(i).line(2))
    leg = plotting.legend(ax)
    assert len(leg.get_texts()) == 14
    assert {t.get_fontsize() for t in leg.get_texts()} == {10.0}
    assert _bbox(leg, fig).x0 >= _bbox(ax, fig).x1  # to the right of the axes
    assert plotting.legend(plt.subplots()[1]) is None  # nothing to show


def test_the_figure_legend_sits_below_every_panel_each_label_once(plt):
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    palette = plotting.Palette([f"GNS variant {i}" for i in range(19)], baselines=["NS"])
    for ax in axes:
        for name in palette.names():
            ax.scatter([1], [1], label=name, **palette[name].points())
    leg = plotting.figure_legend(fig)
    texts = [t.get_text() for t in leg.get_texts()]
    assert texts == palette.names()  # each once, in the palette's order
    assert {t.get_fontsize() for t in leg.get_texts()} == {10.0}
    box = _bbox(leg, fig)
    assert all(box.y1 <= _bbox(ax.xaxis, fig, tight=True).y0 for ax in axes)  # below tick labels
    assert box.y0 >= 0 and box.x0 >= 0 and box.x1 <= fig.bbox.x1  # inside the figure
    assert 1 < leg._ncols < 20  # several columns, several rows


def test_legend_columns_fit_the_width():
    labels = ["GNS cache-dist min-variance"] * 19
    assert plotting.legend_columns(labels, 15.9) == 5
    assert plotting.legend_columns(labels, 2.0) == 1
    assert plotting.legend_columns(["a", "b"], 10.0) == 2


def test_bars_are_linear_and_annotated_unless_values_span_orders_of_magnitude(plt):
    fig, (near, wide) = plt.subplots(1, 2)
    labels, colours = ["NS", "GNS", "LADIES"], plotting.colors(3)
    assert plotting.hbars(near, labels, [5239.0, 1997.0, 908.0], colours) == "bars"
    assert near.get_xscale() == "linear" and near.get_xlim()[0] == 0
    assert [p.get_width() for p in near.patches] == [5239.0, 1997.0, 908.0]
    assert [t.get_text() for t in near.texts] == ["5,239", "1,997", "908"]
    ticks = {t.get_text(): y for t, y in zip(near.get_yticklabels(), near.get_yticks())}
    assert ticks["NS"] > ticks["GNS"] > ticks["LADIES"]  # top to bottom in the labels' order
    assert plotting.hbars(wide, labels, [538197.0, 131.0, 90.0], colours) == "points"
    assert wide.get_xscale() == "log" and not wide.patches
    assert [t.get_text() for t in wide.texts] == ["538,197", "131", "90"]


def test_scale_for_uses_a_log_axis_only_where_needed(plt):
    fig, ax = plt.subplots()
    assert plotting.scale_for(ax, [0.07, 0.5]) == "linear" and ax.get_xscale() == "linear"
    assert plotting.scale_for(ax, [600, 1400, None, float("nan")]) == "linear"
    assert plotting.scale_for(ax, [0.01, 0.5], "y") == "log" and ax.get_yscale() == "log"
    assert plotting.scale_for(ax, []) == "linear"


def _drawn(plt, monkeypatch, plot, result, tmp_path):
    """The figure that ``plot(result, path)`` saves, kept open (the ``plt`` fixture closes it)."""
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot(result, tmp_path / "figure.png")
    assert (tmp_path / "figure.png").is_file()
    return figures[0]


def _series_colours(ax) -> dict[str, str]:
    from matplotlib.colors import to_hex

    out = {}
    for artist in [*ax.get_lines(), *ax.collections]:
        label = artist.get_label()
        if label.startswith("_"):
            continue
        colour = artist.get_color() if hasattr(artist, "get_xdata") else artist.get_facecolor()[0]
        out[label] = to_hex(colour)
    return out


def _tiny_sweep(samplers: list[str], horizons=(4, 8, 16), spread=(1.0, 3.0)) -> dict:
    """A convergence result of the shape convergence.run returns, for plotting only."""
    rows = []
    for i, name in enumerate(samplers):
        level = spread[0] + (spread[1] - spread[0]) * i / max(1, len(samplers) - 1)
        points = [
            dict(
                horizon=t,
                mean=level * (t / horizons[0]) ** -0.5,
                sd=0.1,
                curve_steps=list(range(0, t + 1, 4)),
                curve_norms=[level * 10 / (1 + s) for s in range(0, t + 1, 4)],
                curve_losses=[level / (1 + s) for s in range(0, t + 1, 4)],
            )  # fmt: skip
            for t in horizons
        ]
        rows.append(dict(sampler=name, horizons=points))
    band = [1.2 * p["mean"] for p in rows[0]["horizons"]]  # NS's match band, above its mean
    return {"rows": rows, "band": band}


def test_the_theory_figures_give_every_series_its_own_colour(plt, monkeypatch, tmp_path):
    from gns_jax.theory import convergence, gradients, variance

    samplers = ["NS"] + [f"GNS {e} {f} %" for e in ("ht", "hajek") for f in (1, 2, 5, 10, 20, 50)]
    fig = _drawn(plt, monkeypatch, convergence.plot, _tiny_sweep(samplers), tmp_path)
    for ax in fig.axes:
        colours = {k: v for k, v in _series_colours(ax).items() if k in samplers}
        assert sorted(colours) == sorted(samplers)
        assert len(set(colours.values())) == len(samplers)  # 13 series, 13 colours
        assert colours["NS"] == plotting.BASELINE
    assert fig.axes[2].get_yscale() == "linear"  # A(T) spans less than 10x here
    (leg,) = fig.legends  # one legend below the panels, at the normal size
    assert {t.get_text() for t in leg.get_texts()} >= set(samplers)
    assert {t.get_fontsize() for t in leg.get_texts()} == {10.0}

    rows = [
        dict(stage=stage, estimator=est, fraction=f, bias=b * 1e-3, var=b * 1e-2)
        for stage in ("init", "trained")
        for est, b in (("exact", 1.0), ("hajek", 10.0), ("ht", 100.0))
        for f in (0.01, 0.1)
    ] + [
        dict(stage=s, estimator="ns", fraction=None, bias=1e-3, var=1e-2)
        for s in ("init", "trained")
    ]
    fig = _drawn(plt, monkeypatch, gradients.plot, {"rows": rows}, tmp_path)
    for ax in fig.axes:
        colours = _series_colours(ax)
        assert len({colours[f"{e} bias"] for e in ("exact", "hajek", "ht")}) == 3
        assert colours["NS bias"] == plotting.BASELINE
        assert ax.get_yscale() == "log"  # 1e-3 to 1: orders of magnitude
    assert {t.get_fontsize() for t in fig.legends[0].get_texts()} == {10.0}

    rho = np.array([0.01, 0.02, 0.05])
    sweep = dict(rho=rho, closed=1 / rho, measured=1.05 / rho, ns_mean={5: 0.1, 10: 0.01},
                 targets=10, slope=-1.0, slope_se=0.01)  # fmt: skip
    gns, ns = np.geomspace(1e-2, 1e2, 20), np.geomspace(1e-3, 1e-1, 20)
    per_node = dict(predicted=gns, measured=gns, ns_predicted=ns, ns_measured=ns, fraction=0.2)
    fig = _drawn(plt, monkeypatch, variance.plot, {"sweep": sweep, "per_node": per_node}, tmp_path)
    left = _series_colours(fig.axes[0])
    assert left["GNS measured"] == left["GNS closed form (items 2+3)"]  # one series, two forms
    distinct = [
        left[k] for k in ("GNS measured", "node-wise K=5 (item 5)", "node-wise K=10 (item 5)")
    ]
    assert len(set(distinct)) == 3
    for ax in fig.axes:
        assert {t.get_fontsize() for t in ax.get_legend().get_texts()} == {10.0}


def test_save_png_keeps_the_figure_in_a_fraction_of_the_bytes(tmp_path):
    """A line plot saved as a palette PNG: the same size in pixels, nearly the same pixels, at
    most half of matplotlib's own bytes; the same figure saved twice gives the same file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.linspace(0, 10, 400)
    for i in range(8):
        ax.plot(x, np.sin(x + i) * (i + 1), label=f"series {i}")
    ax.legend()
    plain, small, again = (tmp_path / f"{n}.png" for n in ("plain", "small", "again"))
    fig.savefig(plain, dpi=100)
    plotting.save_png(fig, small, dpi=100)
    plotting.save_png(fig, again, dpi=100)
    plt.close(fig)
    assert small.stat().st_size <= plain.stat().st_size / 2
    assert small.read_bytes() == again.read_bytes()
    with Image.open(plain) as a, Image.open(small) as b:
        assert a.size == b.size and b.mode == "P"
        ref = np.asarray(a.convert("RGB"), dtype=float)
        got = np.asarray(b.convert("RGB"), dtype=float)
    assert np.abs(ref - got).mean() < 2.0  # on 0-255: the lines and text survive
