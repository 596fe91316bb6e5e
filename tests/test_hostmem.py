"""The huge-page restart of the commands (gns_jax/hostmem.py)."""

import os
import subprocess
import sys

import pytest

from gns_jax.hostmem import (
    TUNABLE,
    _glibc_version,
    _thp_mode,
    huge_page_environment,
)

LINUX = dict(platform="linux", glibc=(2, 36), thp_mode="madvise")


def test_adds_the_tunable_once_and_keeps_other_tunables():
    env = huge_page_environment({"PATH": "/bin"}, **LINUX)
    assert env["GLIBC_TUNABLES"] == TUNABLE and env["PATH"] == "/bin"
    assert huge_page_environment(env, **LINUX) is None  # the restarted process stays
    other = huge_page_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, **LINUX)
    assert other["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{TUNABLE}"


@pytest.mark.parametrize(
    "environ, overrides",
    [
        ({"GNS_JAX_HUGE_PAGES": "0"}, {}),
        ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, {}),  # the user's choice stands
        ({}, {"platform": "darwin", "glibc": None}),
        ({}, {"glibc": None}),  # musl
        ({}, {"glibc": (2, 34)}),  # no hugetlb tunable yet
        ({}, {"thp_mode": "never"}),
        ({}, {"thp_mode": "always"}),
        ({}, {"thp_mode": None}),
    ],
)
def test_no_restart_where_it_gains_nothing(environ, overrides):
    assert huge_page_environment(environ, **{**LINUX, **overrides}) is None


def test_a_command_restarts_with_the_tunable_and_its_arguments():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLIBC_", "GNS_JAX_HUGE"))}
    code = (
        "import os, sys; from gns_jax.hostmem import restart_with_huge_pages; "
        "restart_with_huge_pages(); print(os.environ.get('GLIBC_TUNABLES'), sys.argv[1:])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "a", "--b"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    expected = huge_page_environment(env, sys.platform, _glibc_version(), _thp_mode())
    tunables = expected["GLIBC_TUNABLES"] if expected else None
    assert out.stdout.strip() == f"{tunables} ['a', '--b']"
