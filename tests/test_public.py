"""The public surface: exactly the documented names, and an import with no side effects."""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import subprocess
import sys
import textwrap
import zipfile
from email.parser import Parser
from pathlib import Path

import cuscan
from cuscan import _kernels
from tests.conftest import require

SUBPACKAGES = {"signal", "nn"}  # imported on their own: `import cuscan.signal`


def test_all_is_the_public_api():
    public = {name for name in vars(cuscan) if not name.startswith("_")} - SUBPACKAGES
    assert set(cuscan.__all__) == {"linear_recurrence", "linear_recurrence_vjp"}
    assert public == set(cuscan.__all__)


def test_signal_all_is_its_public_api():
    import cuscan.signal

    public = {name for name in vars(cuscan.signal) if not name.startswith("_")}
    assert set(cuscan.signal.__all__) == {"ema", "filtfilt", "lfilter", "lfilter_zi", "lfiltic",
                                          "sosfilt", "sosfilt_zi", "sosfiltfilt"}
    assert public == set(cuscan.signal.__all__)


def test_nn_all_is_its_public_api():
    require("torch")
    import cuscan.nn

    public = {name for name in vars(cuscan.nn) if not name.startswith("_")}
    assert set(cuscan.nn.__all__) == {"GILR", "GILRLSTM", "QRNN", "SRU"}
    assert public == set(cuscan.nn.__all__)


def test_signatures():
    assert str(inspect.signature(cuscan.linear_recurrence)) == (
        "(decays: 'ArrayLike', impulses: 'ArrayLike', initial_state: 'ArrayLike | None' = None, "
        "*, axis: 'int' = 0, reverse: 'bool' = False, method: 'Method' = 'auto') -> 'Any'"
    )
    parameters = list(inspect.signature(cuscan.linear_recurrence_vjp).parameters)
    assert parameters == ["grad_output", "decays", "output", "initial_state", "axis", "reverse"]


def test_type_checkers_see_the_signatures(tmp_path):
    """cuscan carries the py.typed marker, and the public functions (cuscan.signal's too) keep
    their annotations through the decorators that wrap them, so mypy checks a user's calls
    against them: the right calls pass and each wrong one is reported on its own line."""
    require("mypy")
    assert (Path(cuscan.__file__).parent / "py.typed").is_file()
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent("""\
        import numpy as np
        import cuscan
        import cuscan.signal

        x = np.ones(3)
        h = cuscan.linear_recurrence(0.5, x, None, axis=-1, reverse=True, method="serial")
        grads = cuscan.linear_recurrence_vjp(x, 0.5, h, axis=0, reverse=False)
        y = cuscan.signal.lfilter([1.0], [1.0, -0.5], x)
        y = cuscan.signal.filtfilt([1.0], [1.0, -0.5], x, padtype=None, method="gust")
        y = cuscan.signal.ema(x, 0.3, nan_policy="omit")
        cuscan.linear_recurrence(0.5, x, method="fast")
        cuscan.linear_recurrence(0.5, x, None, 0)
        cuscan.linear_recurrence(0.5, x, axes=0)
        cuscan.linear_recurrence_vjp(x, 0.5, h, reverse="yes")
        cuscan.signal.sosfiltfilt([[1, 0, 0, 1, -0.5, 0]], x, padtype="reflect")
        cuscan.signal.filtfilt([1.0], [1.0, -0.5], x, method="gustafsson")
        cuscan.signal.ema(x, 0.3, nan_policy="drop")
        cuscan.signal.lfilter([1.0], [1.0, -0.5], x, axes=0)
        """))
    # NumPy's own annotations are not followed: they cost most of the time and are not cuscan's.
    # cuscan's are read, its own modules not checked, as those of an installed package.
    (tmp_path / "mypy.ini").write_text("[mypy]\n[mypy-numpy.*]\nfollow_imports = skip\n"
                                       "[mypy-cuscan.*]\nfollow_imports = silent\n")
    environment = dict(os.environ)
    try:
        importlib.metadata.distribution("cuscan")
    except importlib.metadata.PackageNotFoundError:  # run from the tree (PYTHONPATH), as a user
        environment["MYPYPATH"] = str(Path(cuscan.__file__).parents[1])  # would not
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini",
                             "--cache-dir", str(tmp_path / "cache"), "user.py"],
                            cwd=tmp_path, env=environment, capture_output=True, text=True)
    lines = sorted({int(line.split(":")[1]) for line in result.stdout.splitlines()
                    if line.startswith("user.py:") and ": error:" in line})
    assert lines == list(range(11, 19)), result.stdout + result.stderr


def test_wheel_holds_the_kernels_the_type_marker_and_the_license(tmp_path):
    """The wheel built from the tree: the CUDA source the GPU backend compiles, py.typed, the
    license, and metadata whose version is ``cuscan.__version__`` (its one source)."""
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w",
                    str(tmp_path), str(root)], check=True)
    (wheel,) = tmp_path.glob("cuscan-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"cuscan-{cuscan.__version__}.dist-info"
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
    assert f"cuscan/kernels/{_kernels.SOURCE}" in names
    assert "cuscan/py.typed" in names
    assert f"{info}/licenses/LICENSE" in names
    assert metadata["Version"] == cuscan.__version__
    assert metadata["License-Expression"] == "MIT"


def test_import_loads_no_framework_and_no_cupy():
    code = (
        "import sys, cuscan\n"
        "heavy = {'cupy', 'torch', 'jax', 'tensorflow', 'scipy'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nn_without_torch_says_what_to_install():
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "try:\n"
        "    import cuscan.nn\n"
        "except ModuleNotFoundError as error:\n"
        "    assert str(error) == 'cuscan.nn needs PyTorch; install it, or cuscan[torch]'\n"
        "    assert error.name == 'torch'\n"
        "else:\n"
        "    raise AssertionError('imported')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
