"""theory/: the closed forms against exact enumeration, and every check's criterion (small setting).

The four ``test_claim_*`` tests run the small setting of ``python -m theory`` (about two minutes in
all on 2 CPU cores) and assert each criterion the module states.
"""

import itertools
import json

import numpy as np
import pytest

from gns_jax.cache import cache_distribution, inclusion_probability
from gns_jax.graph import from_edges
from theory import SMALL, convergence, gradients, unbiased, variance
from theory.__main__ import main


def _tiny_graph():
    # node 0 has neighbours 1..4 of degrees 1, 2, 2, 3; node 5 hangs off 3 and 4
    s = np.array([1, 2, 3, 4, 2, 3, 4, 5, 4])
    r = np.array([0, 0, 0, 0, 5, 5, 5, 4, 1])
    return from_edges(s, r, 6, symmetrize=True)


def test_closed_form_variance_equals_exact_enumeration_of_the_cache():
    graph = _tiny_graph()
    p = cache_distribution(graph, "degree")
    m = 3
    pi = inclusion_probability(p, m)
    x = np.array([0.5, 1.0, -2.0, 3.0, 0.25, 1.5])
    for v in (0, 4, 5):
        nbrs, d = graph.neighbors(v), graph.degrees()[v]
        values, probs = [], []
        for draws in itertools.product(range(graph.num_nodes), repeat=m):
            cached = set(draws)
            values.append(sum(x[u] / (d * pi[u]) for u in nbrs if u in cached))
            probs.append(np.prod(p[list(draws)]))
        values, probs = np.array(values), np.array(probs)
        mean = probs @ values
        np.testing.assert_allclose(mean, x[nbrs].mean(), rtol=1e-12)  # item 1, exactly
        exact = probs @ (values - mean) ** 2
        closed = variance.closed_form_variance(graph, x, np.array([v]), p, m)[0]
        np.testing.assert_allclose(closed, exact, rtol=1e-10)


def test_node_wise_closed_form_equals_exact_enumeration_of_subsets():
    graph = from_edges(np.arange(1, 7), np.zeros(6, int), 7, symmetrize=True)
    x = np.array([0.0, 1.0, -2.0, 3.0, 0.5, 4.0, -1.0])
    for k in (1, 3, 5, 6):
        means = [x[list(c)].mean() for c in itertools.combinations(range(1, 7), k)]
        closed = variance.ns_closed_form(graph, x, np.array([0]), k)[0]
        np.testing.assert_allclose(closed, np.var(means), rtol=1e-12, atol=1e-15)


def test_bound_forms_agree_at_s_equal_1_and_stop_at_3_over_2():
    below = convergence.bound(1.0, 2.0, 0.1, 10.0, 3.0, 0.5)
    above = convergence.bound(1.0 + 1e-12, 2.0, 0.1, 10.0, 3.0, 0.5)
    np.testing.assert_allclose(below, above, rtol=1e-9)
    assert below == (2 * 2.0 / (0.1 * 10.0), 3.0 + 0.5)
    assert convergence.bound(1.5, 2.0, 0.1, 10.0, 3.0, 0.5) is None
    # the floor grows with s beyond 1 (a larger step pays more for the noise)
    assert convergence.bound(1.3, 2.0, 0.1, 10.0, 3.0, 0.5)[1] > below[1]


def _assert_all_pass(result):
    failed = [c for c in result["checks"] if not c.passed]
    assert not failed, "\n".join(
        f"{c.claim}: {c.measured} (criterion: {c.criterion})" for c in failed
    )


def test_claim_1_unbiasedness():
    result = unbiased.run(SMALL)
    _assert_all_pass(result)
    ht = [r for r in result["rows"] if r["variant"] == "ht"]
    assert all(r["rejected"] == 0 for r in ht)


def test_claim_2_variance():
    result = variance.run(SMALL)
    _assert_all_pass(result)
    assert len(result["checks"]) == 3


def test_claim_3_gradient_error():
    result = gradients.run(SMALL)
    _assert_all_pass(result)
    assert {r["stage"] for r in result["rows"]} == {"init", "trained"}


def test_claim_4_convergence():
    result = convergence.run(SMALL)
    _assert_all_pass(result)
    assert result["proper"] in SMALL.conv_fractions
    assert result["s"] < 1.5


def test_command_prints_verdicts_and_writes_json(tmp_path, capsys):
    out = tmp_path / "theory.json"
    assert main(["--only", "unbiased", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[PASS] 1." in printed and "1 of 1 checks passed" in printed
    saved = json.loads(out.read_text())
    assert saved["unbiased"]["checks"][0]["passed"] is True
    with pytest.raises(SystemExit) as exit_info:
        main(["--json", str(tmp_path / "missing" / "x.json")])
    assert exit_info.value.code == 2
    assert "--json" in capsys.readouterr().err
