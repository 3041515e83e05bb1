"""EmberCpuBackend's Winograd filters transformed at load (``ember.export(..., pack="load")``, the
default; EMC_CONV_WINO_AT_LOAD) against the same filters stored by the exporter
(``pack="export"``): the same output bits for F(4x4), F(2x2) and the transposed F(2x2) of wide
convs on small maps, at 1 and 2 threads, with a file that holds each weight once; and hostile
variants of the flag refused by the runtime's init, naming what is wrong.
"""

from __future__ import annotations

import struct

import pytest
import torch
from backend_cpu_common import WINO, _conv_ops, _run
from torch import nn

import ember
from ember.backends.check import runtime_check
from ember.backends.delegate import DelegateInstr

AT_LOAD, TRANSPOSED = 21, 12  # EMC_CONV_WINO_AT_LOAD, EMC_CONV_TRANSPOSED


class _Convs(nn.Module):
    """3x3 stride-1 convs of each Winograd kind the packer picks, with a residual."""

    def __init__(self, cin: int, mid: int, cout: int) -> None:
        super().__init__()
        self.a = nn.Conv2d(cin, mid, 3, padding=1)
        self.b = nn.Conv2d(mid, mid, 3, padding=1, bias=False)
        self.c = nn.Conv2d(mid, cout, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        y = torch.relu(self.b(y) + y)
        return self.c(y)


# (input shape, channels in / mid / out, the Winograd kinds expected: (tile m, transposed))
CASES = [
    ((1, 16, 32, 32), (16, 24, 19), {(4, 0)}),  # F(4x4): >= 48 tiles of 4x4
    ((2, 17, 15, 13), (17, 40, 33), {(2, 0)}),  # F(2x2), batch 2, odd sizes, Co not a panel
    ((1, 256, 7, 7), (256, 264, 256), {(2, 1)}),  # transposed F(2x2): wide, 16 tiles of 2x2
]


@pytest.mark.parametrize(("shape", "ch", "kinds"), CASES, ids=["f4", "f2", "f2-transposed"])
def test_load_and_export_packing_give_the_same_bits(shape, ch, kinds) -> None:
    torch.manual_seed(0)
    m = _Convs(*ch).eval()
    x = torch.randn(shape)
    load = ember.export(m, (x,), backend="cpu")  # the default: pack="load"
    stored = ember.export(m, (x,), backend="cpu", pack="export")
    convs_l, convs_s = _conv_ops(load.buffer), _conv_ops(stored.buffer)
    assert {(ip[WINO], ip[TRANSPOSED]) for ip in convs_l if ip[WINO]} == kinds
    assert all(ip[AT_LOAD] == (1 if ip[WINO] else 0) for ip in convs_l)
    assert all(ip[AT_LOAD] == 0 for ip in convs_s)
    assert len(load.buffer) < len(stored.buffer)
    x2 = torch.randn(shape)
    for threads in (1, 2):
        got = _run(load, (x2,), threads)
        assert torch.equal(got, _run(stored, (x2,), threads))
        torch.testing.assert_close(got, m(x2), rtol=1e-4, atol=1e-4)


def test_resnet_block_file_holds_weights_once() -> None:
    """A file with Winograd convs packed at load is about its f32 weights' size (the stored
    F(4x4) transform is 4x the bytes of those convs)."""
    torch.manual_seed(1)
    m = _Convs(64, 64, 64).eval()
    x = torch.randn(1, 64, 28, 28)
    weights = sum(p.numel() * 4 for p in m.parameters())
    load = ember.export(m, (x,), backend="cpu")
    stored = ember.export(m, (x,), backend="cpu", pack="export")
    assert len(load.buffer) < 1.1 * weights < 3 * weights < len(stored.buffer)


def test_unknown_pack_is_refused_before_tracing() -> None:
    with pytest.raises(ValueError, match="pack='later'"):
        ember.export(nn.Conv2d(3, 3, 3), (torch.randn(1, 3, 8, 8),), pack="later")


# ---- hostile blobs ---------------------------------------------------------------------------
def _blob() -> bytes:
    torch.manual_seed(2)
    m = _Convs(16, 24, 16).eval()
    prog = ember.export(m, (torch.randn(1, 16, 32, 32),), backend="cpu")
    d = next(i for i in prog._irs["forward"].instrs if isinstance(i, DelegateInstr))
    return bytes(d.processed)


def _wino_op(blob: bytes, nth: int = 0) -> int:
    """Byte offset of the nth Winograd conv's operator record."""
    n_ops = struct.unpack_from("<I", blob, 12)[0]
    ops_off = struct.unpack_from("<Q", blob, 40)[0]
    found = [
        ops_off + 160 * i
        for i in range(n_ops)
        if struct.unpack_from("<I", blob, ops_off + 160 * i)[0] == 1
        and struct.unpack_from("<i", blob, ops_off + 160 * i + 32 + 4 * WINO)[0]
    ]
    return found[nth]


def _refused(blob: bytearray, *words: str) -> None:
    why = runtime_check("EmberCpuBackend", bytes(blob), 1 << 24)
    assert why is not None and all(w in why for w in words), why


def test_runtime_refuses_hostile_wino_at_load() -> None:
    blob = _blob()
    assert runtime_check("EmberCpuBackend", blob, 1 << 24) is None
    at = _wino_op(blob)
    bad = bytearray(blob)
    struct.pack_into("<i", bad, at + 32 + 4 * AT_LOAD, 2)
    _refused(bad, "Winograd-at-load flag 2")
    bad = bytearray(blob)  # the flag on a conv that is not Winograd
    struct.pack_into("<i", bad, at + 32 + 4 * WINO, 0)
    _refused(bad, "Winograd tile")
    bad = bytearray(blob)  # two convs transforming one tensor
    w0 = struct.unpack_from("<i", blob, at + 12)[0]
    struct.pack_into("<i", bad, _wino_op(blob, 1) + 12, w0)
    _refused(bad, "read by another operator")
    bad = bytearray(blob)  # the weights as an input of another operator
    struct.pack_into("<i", bad, _wino_op(blob, 1) + 8, w0)
    _refused(bad, "read by another operator")
    bad = bytearray(blob)  # the flag off: the plain weights are not a transform
    struct.pack_into("<i", bad, at + 32 + 4 * AT_LOAD, 0)
    _refused(bad, "Winograd weights have")
    # the weight tensor's shape: not 3x3, or channels that do not match the conv
    tensors_off = struct.unpack_from("<Q", blob, 32)[0]
    rec = tensors_off + 48 * w0
    for dim, value, words in ((3, 2, ("not [Co, Cin, 3, 3]",)), (1, 15, ("Winograd weights",))):
        bad = bytearray(blob)
        struct.pack_into("<i", bad, rec + 20 + 4 * dim, value)
        _refused(bad, *words)


def test_cli_pack_option(tmp_path, monkeypatch) -> None:
    """``ember-py export --pack export|load`` writes the two forms (the stored one larger)."""
    from ember import cli

    (tmp_path / "packfactory.py").write_text(
        "import torch\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    m = torch.nn.Conv2d(32, 32, 3, padding=1).eval()\n"
        "    return m, (torch.randn(1, 32, 28, 28),)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sizes = {}
    for pack in ("load", "export"):
        out = tmp_path / f"{pack}.pte"
        assert cli.main(["export", "packfactory:make", str(out), "--pack", pack]) == 0
        sizes[pack] = out.stat().st_size
        assert {ip[AT_LOAD] for ip in _conv_ops(out.read_bytes())} == {int(pack == "load")}
    assert sizes["load"] * 2 < sizes["export"]
    with pytest.raises(SystemExit):
        cli.main(["export", "packfactory:make", str(tmp_path / "x.pte"), "--pack", "later"])
