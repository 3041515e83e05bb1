"""Stage: 1-d convolutions as 2-d ones of height 1.

``aten.convolution`` on a ``[N, C, L]`` input (``nn.Conv1d``, ``nn.ConvTranspose1d``: speech
front ends such as wav2vec2's feature encoder and Whisper's stem, temporal convolutions, TCNs) is
rewritten as views to ``[N, C, 1, L]`` and ``[Co, Ci / groups, 1, K]``, the same convolution
with a unit first spatial dim (stride 1, padding 0, dilation 1, output padding 0 there), and a
view back. The values are the same operations in the same order; the backends then take the
convolution as any 2-d one (the weight's view is folded into a constant by
:mod:`ember.passes.fold_graph`), and the portable path runs the 2-d kernel. Only static shapes.
"""

from __future__ import annotations

import logging

import torch
from torch._guards import detect_fake_mode
from torch.fx import Node

log = logging.getLogger(__name__)

_CONV = torch.ops.aten.convolution.default
_VIEW = torch.ops.aten.view.default


def _static_3d(n: object) -> bool:
    v = getattr(n, "meta", {}).get("val") if isinstance(n, Node) else None
    return isinstance(v, torch.Tensor) and v.dim() == 3 and all(isinstance(s, int) for s in v.shape)


def conv1d_as_2d(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Rewrite ``ep``'s 1-d convolutions in place (see the module docstring); returns ``ep``."""
    graph = ep.graph_module.graph
    convs = [
        n
        for n in graph.nodes
        if n.op == "call_function"
        and n.target == _CONV
        and _static_3d(n.args[0])
        and _static_3d(n.args[1])
        and _static_3d(n)
    ]
    if not convs:
        return ep
    fake = detect_fake_mode([n.meta["val"] for n in convs])

    def add(target: object, args: tuple, like: Node) -> Node:
        with graph.inserting_before(like):
            node = graph.call_function(target, args)
        node.meta = {k: v for k, v in like.meta.items() if k not in ("val", "tensor_meta")}
        vals = [a.meta["val"] if isinstance(a, Node) else a for a in args]
        with fake or torch._subclasses.fake_tensor.FakeTensorMode():
            node.meta["val"] = target(*vals)  # type: ignore[operator]
        return node

    for n in convs:
        x, w, b, stride, pad, dil, transposed, out_pad, groups = n.args
        xs, ws = n.args[0].meta["val"].shape, n.args[1].meta["val"].shape
        x4 = add(_VIEW, (x, [xs[0], xs[1], 1, xs[2]]), n)
        w4 = add(_VIEW, (w, [ws[0], ws[1], 1, ws[2]]), n)
        conv = add(
            _CONV,
            (
                x4,
                w4,
                b,
                [1, *stride],
                [0, *pad],
                [1, *dil],
                transposed,
                [0, *out_pad],
                groups,
            ),
            n,
        )
        ys = n.meta["val"].shape
        y = add(_VIEW, (conv, list(ys)), n)
        n.replace_all_uses_with(y)
        graph.erase_node(n)
    graph.lint()
    ep.graph_module.recompile()
    log.info("rewrote %d 1-d convolution(s) as 2-d ones", len(convs))
    return ep
