"""Optional extras: imported once, on demand; a broken install counts as absent and keeps its reason."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from novelfind.base import extras


@pytest.fixture
def fake_modules(tmp_path, monkeypatch):
    """A folder on sys.path with a module that imports (counting its imports) and one that is broken."""
    (tmp_path / "nf_fake_ok.py").write_text("import builtins\nbuiltins.nf_fake_imports += 1\n")
    (tmp_path / "nf_fake_broken.py").write_text(
        "raise OSError('libfake.so: cannot open shared object file')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("builtins.nf_fake_imports", 0, raising=False)
    for name in ("nf_fake_ok", "nf_fake_broken", "nf_fake_missing"):
        monkeypatch.delitem(extras._loaded, name, raising=False)
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def test_an_extra_is_imported_once_even_when_asked_from_many_threads(fake_modules):
    import builtins

    results = []
    threads = [threading.Thread(target=lambda: results.append(extras.load("nf_fake_ok"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(m is results[0] for m in results)
    assert extras.available("nf_fake_ok")
    sys.modules.pop("nf_fake_ok")  # a second import would run the module again; load must not
    assert extras.load("nf_fake_ok") is results[0] and builtins.nf_fake_imports == 1


def test_a_broken_or_missing_extra_is_absent_and_keeps_its_reason(fake_modules):
    assert not extras.available("nf_fake_broken")
    for _ in range(2):  # the first failure, raised again
        with pytest.raises(OSError, match="libfake.so: cannot open shared object file"):
            extras.load("nf_fake_broken")
    assert not extras.available("nf_fake_missing")
    with pytest.raises(ImportError) as err:
        extras.load("nf_fake_missing")
    assert err.value.name == "nf_fake_missing"


def test_installed_finds_without_importing(fake_modules):
    assert extras.installed("nf_fake_broken")  # found; not imported, so not known to be broken
    assert "nf_fake_broken" not in sys.modules and "nf_fake_broken" not in extras._loaded
    assert not extras.installed("nf_fake_missing")
    assert not extras.installed("nf_fake_missing.sub")  # a missing parent is no error


def test_importing_novelfind_imports_no_extra():
    code = (
        "import sys, novelfind.media.decode, novelfind.media.raw, novelfind.outputs.xmp,"
        " novelfind.model.features, novelfind.extract.engines.local\n"
        "heavy = ('rawpy', 'exiv2', 'onnxruntime', 'ray', 'nvidia.nvimgcodec')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
