"""The examples in pbench's docstrings run, and say what the code does."""

import doctest
import importlib

import pytest

from pbench import sources

WITH_EXAMPLES = sorted(sources.module_name(p) for p in sources.PACKAGE.rglob("*.py") if ">>> " in p.read_text())


def test_the_package_has_examples_to_run():
    assert {"pbench.agreement", "pbench.judging.votes"} <= set(WITH_EXAMPLES)


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples_hold(name):
    found = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert found.attempted > 0 and found.failed == 0
