"""The Python examples in the README and docs/ run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from tests.conftest import _gpu_available, require

ROOT = Path(__file__).resolve().parents[1]
# page -> the modules its examples need ("GPU": CuPy and a CUDA device)
PAGES = {"README.md": [], "docs/api.md": [], "docs/signal.md": ["scipy", "torch"],
         "docs/gpu.md": ["GPU"], "docs/torch.md": ["torch"], "docs/jax.md": ["jax"],
         "docs/tensorflow.md": ["tensorflow"], "docs/nn.md": ["torch"]}


def test_every_page_with_examples_is_run():
    pages = {str(p.relative_to(ROOT)) for p in [ROOT / "README.md", *ROOT.glob("docs/*.md")]
             if "```python" in p.read_text()}
    assert pages == set(PAGES)


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.gpu) if "GPU" in PAGES[p]
                                  else p for p in sorted(PAGES)])
def test_examples_run(page, monkeypatch):
    """A page's blocks run in order in one module, as a user's script running them one
    after another would, importable by name (torch.compile looks its globals up by the
    module's name)."""
    for module in PAGES[page]:
        if module == "GPU":
            if not _gpu_available():
                pytest.skip("needs CuPy and a CUDA GPU")
        else:
            require(module)
    text = (ROOT / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks
    name = f"docs_{Path(page).stem}"
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, module)
    for block in blocks:
        exec(compile(block, page, "exec"), module.__dict__)
