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
