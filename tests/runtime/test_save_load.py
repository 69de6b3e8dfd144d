"""Prepared modules on disk: ``StaticModule.save`` / ``sr.load``.

Round trips are differential: the loaded module (in this process, and in a fresh one) must
give what the TorchScript interpreter gives on the original module, on two input sets of
different shapes. Damaged and hostile files must be refused with an error that says what is
wrong, and nothing in them may run.
"""

import copy
import io
import json
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest
import torch
from differential import OPTION_SETS, assert_same, script
from torch import nn

import static_runtime as sr
from static_runtime.models import MODELS, RunningStats
from static_runtime.runtime import serialize

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: control flow, module state written by forward, a TorchScript class, embedding bags, and
#: the fused operators (oneDNN convolutions with prepacked weights, attention)
ROUND_TRIP_MODELS = ["mlp", "control_flow", "attribute_setter", "class_user", "dlrm",
                     "resnet_small", "multi_head_attention"]


def _inputs(name: str) -> list[tuple]:
    spec = MODELS[name]
    return [spec.example_inputs(batch=2, seed=1), spec.example_inputs(batch=5, seed=2)]


def _oracle_outputs(scripted, name: str) -> list:
    """The interpreter's outputs on a copy of the module (state written by forward stays in
    the copy), for the input sets in order."""
    oracle = copy.deepcopy(scripted)
    return [oracle(*xs) for xs in _inputs(name)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, tuple[pathlib.Path, object]]:
    """name → (saved file, scripted original); saved before any call."""
    out = {}
    for name in ROUND_TRIP_MODELS:
        scripted = script(MODELS[name].build())
        path = tmp_path_factory.mktemp("saved") / f"{name}.srm"
        sr.StaticModule(scripted).save(path)
        out[name] = path, scripted
    return out


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("option_set", sorted(OPTION_SETS))
@pytest.mark.parametrize("name", ROUND_TRIP_MODELS)
def test_round_trip_in_process(name, option_set, tmp_path):
    options = OPTION_SETS[option_set]
    scripted = script(MODELS[name].build())
    original = sr.StaticModule(scripted, options=options)
    path = tmp_path / "m.srm"
    original.save(path)
    loaded = sr.load(path)
    assert loaded.options == options
    assert str(loaded.graph) == str(original.graph)
    assert serialize.implementation_choices(loaded) == \
        serialize.implementation_choices(original)
    expected = _oracle_outputs(scripted, name)
    held = []
    for xs, want in zip(_inputs(name), expected):
        before = copy.deepcopy(xs)
        got = loaded(*xs)
        assert_same(got, want)
        assert_same(xs, before, "input (must be unchanged)")
        held.append((got, copy.deepcopy(got)))
    for got, snapshot in held:
        assert_same(got, snapshot, "an earlier output after later calls")


_CHILD = """
import sys, torch
import static_runtime as sr
from static_runtime.models import MODELS
results = {}
for name, path in zip(sys.argv[2::2], sys.argv[3::2]):
    mod = sr.load(path)
    spec = MODELS[name]
    results[name] = [mod(*spec.example_inputs(batch=2, seed=1)),
                     mod(*spec.example_inputs(batch=5, seed=2))]
torch.save(results, sys.argv[1])
"""


def test_round_trip_in_a_fresh_process(saved, tmp_path):
    results = tmp_path / "results.pt"
    argv = [sys.executable, "-c", _CHILD, str(results)]
    for name, (path, _) in saved.items():
        argv += [name, str(path)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(argv, check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = torch.load(results, weights_only=True)
    for name, (_, scripted) in saved.items():
        assert_same(got[name], _oracle_outputs(scripted, name), f"{name} output")


def test_state_written_by_forward_is_saved_as_it_is_now(tmp_path):
    scripted = script(MODELS["attribute_setter"].build())
    mod = sr.StaticModule(scripted)
    oracle = copy.deepcopy(scripted)
    x = MODELS["attribute_setter"].example_inputs(batch=3)
    mod(*x)
    oracle(*x)
    mod.save(tmp_path / "m.srm")
    self_obj = sr.load(tmp_path / "m.srm").graph.nodes[0].attrs["value"]
    assert self_obj.attrs["b"] == 20 == oracle.b
    assert self_obj.attrs["scaler"].attrs["scale"] == oracle.scaler.scale


def test_views_of_one_storage_stay_views_with_their_strides(tmp_path):
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            return x @ self.w + x @ self.w.t()

    def constant_tensors(mod):
        return [n.attrs["value"] for n in mod.graph.walk()
                if isinstance(n.attrs.get("value"), torch.Tensor)]

    # (pack_linears would pack the two products into one constant, which is no view)
    mod = sr.StaticModule(script(Tied().eval()), sr.StaticModuleOptions(pack_linears=False))
    mod.save(tmp_path / "m.srm")
    loaded = sr.load(tmp_path / "m.srm")
    before, after = constant_tensors(mod), constant_tensors(loaded)
    # constant propagation folded ``w.t()`` into a second constant, a view of ``w``
    assert len({t.untyped_storage().data_ptr() for t in before}) == 1 < len(before)
    assert len({t.untyped_storage().data_ptr() for t in after}) == 1
    assert [t.stride() for t in after] == [t.stride() for t in before]
    x = torch.randn(3, 4)
    assert_same(loaded(x), mod(x))


def test_unsaveable_value_is_refused_with_its_name(tmp_path):
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.stats = RunningStats(4)

        def forward(self, x):
            self.stats.update(x)
            return self.stats.mean()

    mod = sr.StaticModule(script(Holder()))
    with pytest.raises(sr.UnsaveableValueError, match=r"%self\.stats.*RunningStats"):
        mod.save(tmp_path / "m.srm")
    assert not (tmp_path / "m.srm").exists()


# --------------------------------------------------------------------------- bad files


def _rewrite(src: pathlib.Path, dst: pathlib.Path, *, members: dict[str, bytes] | None = None,
             manifest_edit=None, fix_digests: bool = False) -> None:
    """Copy an archive, replacing members; ``fix_digests`` recomputes every checksum (what a
    deliberate tamperer would do)."""
    with zipfile.ZipFile(src) as zf:
        data = {n: zf.read(n) for n in zf.namelist()}
    data.update(members or {})
    manifest = json.loads(data[serialize.MANIFEST])
    if manifest_edit is not None:
        manifest_edit(manifest)
    if fix_digests:
        for name in (serialize.GRAPH, serialize.TENSORS):
            manifest["sha256"][name] = serialize._sha256(data[name])
    if manifest_edit is not None or fix_digests:
        data[serialize.MANIFEST] = json.dumps(manifest).encode()
        data[serialize.MANIFEST_DIGEST] = serialize._sha256(data[serialize.MANIFEST]).encode()
    with zipfile.ZipFile(dst, "w") as zf:
        for name, payload in data.items():
            zf.writestr(name, payload)


@pytest.fixture
def good(saved) -> pathlib.Path:
    return saved["mlp"][0]


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such prepared module"):
        sr.load(tmp_path / "nope.srm")


def test_truncated_file(good, tmp_path):
    bad = tmp_path / "bad.srm"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(sr.PreparedFileError, match="truncated or corrupted"):
        sr.load(bad)


def test_not_a_zip(tmp_path):
    bad = tmp_path / "bad.srm"
    bad.write_text("graph(%x : Tensor):\n  return (%x)\n")
    with pytest.raises(sr.PreparedFileError, match="not a prepared module file"):
        sr.load(bad)


def test_a_torchscript_archive_is_not_a_prepared_module(tmp_path):
    bad = tmp_path / "model.pt"
    torch.jit.save(script(MODELS["mlp"].build()), str(bad))
    with pytest.raises(sr.PreparedFileError, match="not a prepared module: its members"):
        sr.load(bad)


def test_flipped_byte_in_the_archive(good, tmp_path):
    data = bytearray(good.read_bytes())
    at = data.index(b"linear") + 2  # inside graph.txt's stored bytes
    data[at] ^= 0x01
    bad = tmp_path / "bad.srm"
    bad.write_bytes(bytes(data))
    with pytest.raises(sr.PreparedFileError, match="corrupted"):
        sr.load(bad)


def test_altered_graph(good, tmp_path):
    with zipfile.ZipFile(good) as zf:
        text = zf.read(serialize.GRAPH).decode()
    bad = tmp_path / "bad.srm"
    _rewrite(good, bad, members={serialize.GRAPH: text.replace("relu", "sigmoid")
                                 .encode()})
    with pytest.raises(sr.PreparedFileError, match="graph.txt does not match the SHA-256"):
        sr.load(bad)


def test_altered_tensor_data(good, tmp_path):
    with zipfile.ZipFile(good) as zf:
        tensors = torch.load(io.BytesIO(zf.read(serialize.TENSORS)), weights_only=True)
    tensors[0] = tensors[0] + 1
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    bad = tmp_path / "bad.srm"
    _rewrite(good, bad, members={serialize.TENSORS: buffer.getvalue()})
    with pytest.raises(sr.PreparedFileError, match="tensors.pt does not match the SHA-256"):
        sr.load(bad)


def test_altered_manifest(good, tmp_path):
    with zipfile.ZipFile(good) as zf:
        manifest = zf.read(serialize.MANIFEST)
    bad = tmp_path / "bad.srm"
    _rewrite(good, bad, members={serialize.MANIFEST: manifest.replace(b'"codegen"',
                                                                      b'"interpreter"')})
    with pytest.raises(sr.PreparedFileError, match="manifest.json does not match its SHA-256"):
        sr.load(bad)


def test_wrong_format_version(good, tmp_path):
    bad = tmp_path / "bad.srm"
    _rewrite(good, bad, manifest_edit=lambda m: m.update(format_version=2))
    with pytest.raises(sr.PreparedFileError, match="format version 2.*reads version 1"):
        sr.load(bad)


def test_other_torch_version(good, tmp_path):
    bad = tmp_path / "bad.srm"
    _rewrite(good, bad, manifest_edit=lambda m: m["versions"].update(torch="2.11.0"))
    with pytest.raises(sr.PreparedFileError, match="written with torch '2.11.0'.*prepare the"):
        sr.load(bad)


def test_changed_implementation_choice(good, tmp_path):
    def edit(m):
        m["implementations"][0]["label"] = "something else"

    bad = tmp_path / "bad.srm"
    _rewrite(good, bad, manifest_edit=edit)
    with pytest.raises(sr.PreparedFileError, match="now selects .* but was saved with"):
        sr.load(bad)


def test_tampered_graph_with_recomputed_checksums_still_parses_and_verifies(good, tmp_path):
    """Checksums do not authenticate (README): a consistent edit gets past them, but the
    graph is still only parsed and verified, never executed as code."""
    with zipfile.ZipFile(good) as zf:
        text = zf.read(serialize.GRAPH).decode()
    bad = tmp_path / "bad.srm"
    _rewrite(good, bad, members={serialize.GRAPH: text.replace("return (", "return (%nope, ")
                                 .encode()}, fix_digests=True)
    with pytest.raises(sr.PreparedFileError, match="saved graph is invalid.*nope"):
        sr.load(bad)


class _Payload:
    """Pickles as a call that creates ``marker``: what a hostile tensors.pt would hold."""

    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


@pytest.mark.parametrize("fix_digests", [False, True], ids=["checksums-stale", "checksums-fixed"])
def test_pickle_payload_is_never_run(good, tmp_path, fix_digests):
    marker = tmp_path / "marker"
    buffer = io.BytesIO()
    torch.save([torch.zeros(1), _Payload(marker)], buffer)
    bad = tmp_path / "bad.srm"
    _rewrite(good, bad, members={serialize.TENSORS: buffer.getvalue()}, fix_digests=fix_digests)
    expected = "weights_only" if fix_digests else "does not match the SHA-256"
    with pytest.raises(sr.PreparedFileError, match=expected):
        sr.load(bad)
    assert not marker.exists()
    # The payload is real: an unrestricted load would have run it.
    torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
    assert marker.exists()
