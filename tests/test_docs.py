"""The Python examples in docs/ run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import require

DOCS = Path(__file__).resolve().parents[1] / "docs"
# page -> the modules its examples need
PAGES = {"torch.md": ["torch"], "jax.md": ["jax"], "tensorflow.md": ["tensorflow"],
         "nn.md": ["torch"]}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_examples_run(page):
    for module in PAGES[page]:
        require(module)
    text = (DOCS / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, f"{page}", "exec"), {"__name__": f"docs_{page}"})
