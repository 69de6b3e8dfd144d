"""The on-disk cache of binding signatures: what it gives back equals what torchgen builds,
and a damaged or foreign file is ignored, never trusted."""

import json

import pytest

from static_runtime.ops import signature_cache as C
from static_runtime.ops import signature_lists as lists
from static_runtime.ops.python_signatures import parse_signature

NAMES = [("torch", "add"), ("torch", "addmm"), ("torch", "relu_"), ("method", "view"),
         ("method", "sum"), ("nn", "linear"), ("torch", "embedding_bag"), ("torch", "nonsense")]


@pytest.fixture
def cache_file(tmp_path):
    return tmp_path / "signatures.json"


def test_rows_read_back_give_the_same_signatures(cache_file):
    writer = C.SignatureCache(cache_file)
    for ns, name in NAMES:
        writer.put(ns, name, lists._signature_rows(ns, name))
    reader = C.SignatureCache(cache_file)
    for ns, name in NAMES:
        rows = reader.get(ns, name)
        assert rows == [tuple(r) for r in lists._signature_rows(ns, name)]
        assert tuple(parse_signature(*r) for r in rows) == lists.signatures(ns, name)
    assert reader.get("torch", "add") and reader.get("torch", "nonsense") == []
    assert reader.get("torch", "never_asked") is None


@pytest.mark.parametrize("content", [
    "{not json", json.dumps(["a list"]), json.dumps({"torch:add": [["add(Tensor x)", 3, None]]}),
    json.dumps({"torch:add": [["only", "two"]]}),
], ids=["not_json", "not_a_dict", "wrong_type", "wrong_length"])
def test_damaged_file_is_ignored_and_rewritten(cache_file, content):
    cache_file.write_text(content)
    cache = C.SignatureCache(cache_file)
    assert cache.get("torch", "add") is None
    cache.put("torch", "add", lists._signature_rows("torch", "add"))
    assert C.SignatureCache(cache_file).get("torch", "add") == \
        [tuple(r) for r in lists._signature_rows("torch", "add")]


def test_unwritable_location_keeps_working(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = C.SignatureCache(blocker / "sub" / "signatures.json")  # a file as the parent
    cache.put("torch", "add", lists._signature_rows("torch", "add"))
    assert cache.get("torch", "add") is not None


def test_file_is_named_after_the_torch_build():
    import torch

    fingerprint = C._yaml_fingerprint()
    assert fingerprint is not None and len(fingerprint) == 16
    cache = C.disk_cache()
    if cache is not None:  # STATIC_RUNTIME_CACHE=off turns it off
        assert cache.path.name == f"signatures-{torch.__version__}-{fingerprint}.json"
