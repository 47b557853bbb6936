"""The Python examples in docs/ run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from tests.conftest import require

DOCS = Path(__file__).resolve().parents[1] / "docs"
# page -> the modules its examples need
PAGES = {"torch.md": ["torch"], "jax.md": ["jax"], "tensorflow.md": ["tensorflow"],
         "nn.md": ["torch"]}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_examples_run(page, monkeypatch):
    """Each block runs in a module of its own, importable by name as a user's script is
    (torch.compile looks its globals up by the module's name)."""
    for module in PAGES[page]:
        require(module)
    text = (DOCS / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks
    for number, block in enumerate(blocks):
        name = f"docs_{Path(page).stem}_{number}"
        module = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, module)
        exec(compile(block, page, "exec"), module.__dict__)
