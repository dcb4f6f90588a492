"""ktune.Runtime without a GPU: opening caches, lookups that must fail cleanly."""

import ctypes
import errno

import pytest

from conftest import SOFTMAX, SOFTMAX_SHAPES

import ktune


def have_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


no_driver = pytest.mark.skipif(have_driver(), reason="a CUDA driver is installed here")


def test_missing_cache_dir_raises(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(ktune.KtuneError) as e:
        ktune.Runtime(missing)
    assert e.value.errno == errno.ENOENT
    assert missing in str(e.value)


def test_empty_cache_dir_is_no_cache(tmp_path):
    with pytest.raises(ktune.KtuneError) as e:
        ktune.Runtime(str(tmp_path))
    assert e.value.errno == errno.ENOENT
    assert str(tmp_path) in str(e.value)


def test_tuned_cache_opens(tuned_cache):
    cache, result = tuned_cache
    assert result["winner"]["family"], result
    rt = ktune.Runtime(cache)
    assert "Runtime" in repr(rt)
    rt.close()
    rt.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        rt.lookup(SOFTMAX, SOFTMAX_SHAPES)


@no_driver
def test_lookup_without_driver_raises_enodev(tuned_cache):
    cache, _ = tuned_cache
    with ktune.Runtime(cache) as rt:
        with pytest.raises(ktune.KtuneError) as e:
            rt.lookup(ktune.Graph(SOFTMAX), SOFTMAX_SHAPES)
        assert e.value.errno == errno.ENODEV
        assert e.value.strerror  # one line from the library
        assert "\n" not in e.value.strerror


def test_cache_from_env(tuned_cache, monkeypatch):
    cache, _ = tuned_cache
    monkeypatch.setenv("KTUNE_CACHE", cache)
    with ktune.Runtime() as rt:
        assert rt.cache_dir is None


def test_device_argument_is_checked(tuned_cache):
    cache, _ = tuned_cache
    with ktune.Runtime(cache) as rt:
        with pytest.raises(ValueError, match="not a CUDA device"):
            rt.lookup(SOFTMAX, SOFTMAX_SHAPES, device="cpu")
        with pytest.raises(TypeError):
            rt.lookup(SOFTMAX, SOFTMAX_SHAPES, device=True)
