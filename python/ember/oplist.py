"""The runtime's operator list, read from the C kernel registry files (one source of truth).

The C runtime declares every kernel in ``kernels/{portable,prim,quantized}/ops.def`` as
lines of the form::

    EM_OP("aten::add.out", some_c_fn, 5, EM_DT_REALS)

(full kernel name, C function, number of arguments including trailing returns or -1 for variable,
dtype mask). ember.opdefs parses those files (the one parser; tools/selective_build.py uses it
too); this module gives the exporter the list, so it accepts exactly the operators the runtime
registers.

Dtype mask convention: the mask lists the dtypes of the operator's *primary* tensor, i.e. its first
tensor argument (``self``/``input``), or its output for operators without tensor inputs (``full``,
``arange``...). Index, mask and shape operands are not checked against the mask.

Search order for the files: ``$EMBER_KERNELS_DIR``, the repository checkout the package lives in
(``<repo>/kernels``), and ``ember/_kernels`` inside an installed package. When none has any entry
(e.g. before the kernel library exists), :func:`load_oplist` falls back to the operator inventory
of stock ExecuTorch's portable + prim libraries with every dtype allowed, and logs a warning.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ember.dtypes import NAMES, torch_to_code
from ember.opdefs import (  # noqa: F401  (re-exported: the parser's names, as before)
    ALL_DTYPES_MASK,
    DEF_FILES,
    DTYPE_BITS,
    DTYPE_GROUPS,
    KernelInfo,
    parse_dtype_mask,
    parse_ops_def,
    read_ops_def,
)

log = logging.getLogger(__name__)

# Mask names and bits (EM_DTYPE_BIT numbering) come from the one dtype table; the parser of the
# .def files is ember.opdefs (also used by tools/selective_build.py).
TORCH_DTYPE_NAME: dict[torch.dtype, str] = {
    t: NAMES[code].upper()
    for t, code in torch_to_code().items()
    if NAMES[code].upper() in DTYPE_BITS
}

# Stock ExecuTorch portable + prim kernel names (ExecuTorch 1.5's portable library and prim ops);
# used only when no ops.def file is available.
_STOCK_FALLBACK = """
_adaptive_avg_pool2d.out _cdist_forward.out _conj_physical.out _log_softmax.out
_native_batch_norm_legit.out _native_batch_norm_legit.no_stats_out
_native_batch_norm_legit_no_training.out _pdist_forward.out _softmax.out _to_copy.out abs.out
acos.out acosh.out add.out add.Scalar_out addmm.out alias_copy.out amax.out amin.out any.all_out
any.dims_out any.out arange.out arange.start_out argmax.out argmin.out as_strided_copy.out asin.out
asinh.out atan.out atan2.out atanh.out avg_pool2d.out bitwise_and.Scalar_out bitwise_and.Tensor_out
bitwise_not.out bitwise_or.Scalar_out bitwise_or.Tensor_out bitwise_xor.Scalar_out
bitwise_xor.Tensor_out bmm.out cat.out ceil.out clamp.out clamp.Tensor_out clone.out
constant_pad_nd.out convolution.out copy.out copy_ cos.out cosh.out cumsum.out detach_copy.out
diagonal_copy.out div.out div.Scalar_mode_out div.Scalar_out div.out_mode embedding.out empty.out
eq.Scalar_out eq.Tensor_out elu.out erf.out exp.out expand_copy.out expm1.out fill.Scalar_out
fill.Tensor_out flip.out floor.out floor_divide.out fmod.Tensor_out fmod.Scalar_out full.out
full_like.out gather.out ge.Scalar_out ge.Tensor_out gelu.out glu.out gt.Scalar_out gt.Tensor_out
hardtanh.out index.Tensor_out index_put.out index_put_ index_select.out isinf.out isnan.out
le.Scalar_out le.Tensor_out leaky_relu.out lift_fresh_copy.out log.out log10.out log1p.out log2.out
logical_and.out logical_not.out logical_or.out logical_xor.out logit.out lt.Scalar_out lt.Tensor_out
masked_fill.Scalar_out masked_scatter.out masked_select.out max.dim_max max.unary_out maximum.out
max_pool2d_with_indices.out mean.out mean.dtype_out min.dim_min min.unary_out minimum.out mm.out
mul.out mul.Scalar_out narrow_copy.out native_dropout.out native_group_norm.out
native_layer_norm.out ne.Scalar_out ne.Tensor_out neg.out nonzero.out ones.out permute_copy.out
pixel_shuffle.out pixel_unshuffle.out pow.Scalar_out pow.Tensor_Scalar_out pow.Tensor_Tensor_out
prod.int_out prod.out rand.out randn.out reciprocal.out relu.out remainder.Tensor_out
remainder.Scalar_out repeat.out repeat_interleave.Tensor_out reflection_pad1d.out
reflection_pad2d.out reflection_pad3d.out replication_pad1d.out replication_pad2d.out
replication_pad3d.out roll.out round.out rsqrt.out rsub.Scalar_out scalar_tensor.out
scatter.src_out scatter.value_out scatter_add.out select_copy.int_out select_scatter.out
sigmoid.out sign.out sin.out sinh.out slice_copy.Tensor_out slice_scatter.out split_copy.Tensor_out
split_with_sizes_copy.out sqrt.out squeeze_copy.dim_out squeeze_copy.dims_out stack.out sub.out
sub.Scalar_out sum.IntList_out t_copy.out tan.out tanh.out topk.values transpose_copy.int_out
tril.out trunc.out unbind_copy.int_out unfold_copy.out unsqueeze_copy.out
upsample_bilinear2d.vec_out upsample_nearest2d.vec_out var.correction_out var.out
view_as_real_copy.out view_copy.out where.self_out zeros.out sym_size.int sym_numel
"""
_STOCK_PRIM = [
    f"executorch_prim::{n}.Scalar"
    for n in (
        "add sub mul truediv floordiv mod eq gt ge lt le neg ceil round trunc sym_float sym_int "
        "sym_max sym_min sym_not sym_ite"
    ).split()
] + [
    "executorch_prim::floordiv.int",
    "executorch_prim::mod.int",
    "executorch_prim::et_copy_index.tensor",
    "executorch_prim::et_view.default",
]


@dataclass
class OpList:
    """The set of kernels the runtime registers, by full kernel name."""

    kernels: dict[str, KernelInfo] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    is_fallback: bool = False

    def __contains__(self, name: object) -> bool:
        return name in self.kernels

    def get(self, name: str) -> KernelInfo | None:
        return self.kernels.get(name)

    def supports_dtype(self, name: str, dtype: torch.dtype) -> bool:
        """True if kernel ``name`` is registered and its mask admits ``dtype``."""
        info = self.kernels.get(name)
        if info is None:
            return False
        bit = DTYPE_BITS.get(TORCH_DTYPE_NAME.get(dtype, ""), 0)
        return bool(info.dtype_mask & bit)

    @staticmethod
    def from_names(names: Iterable[str], mask: int = ALL_DTYPES_MASK) -> OpList:
        """Build a list from plain kernel names, all with the same dtype mask (tests, fallback)."""
        return OpList({n: KernelInfo(n, -1, mask) for n in names})


def kernel_dirs() -> list[Path]:
    """Directories that may hold ``portable/ops.def`` and ``prim/ops.def``, in search order."""
    dirs = []
    env = os.environ.get("EMBER_KERNELS_DIR")
    if env:
        dirs.append(Path(env))
    here = Path(__file__).resolve().parent
    dirs.append(here.parent.parent / "kernels")
    dirs.append(here / "_kernels")
    return dirs


@functools.cache
def load_oplist() -> OpList:
    """Load the runtime operator list (cached). See the module docstring for the search order."""
    for d in kernel_dirs():
        kernels: dict[str, KernelInfo] = {}
        sources = []
        for sub in DEF_FILES:
            p = d / sub / "ops.def"
            if p.is_file():
                kernels.update(read_ops_def(p, d))
                sources.append(str(p))
        if kernels:
            log.debug("loaded %d kernels from %s", len(kernels), sources)
            return OpList(kernels, sources)
    log.warning(
        "no kernels/*/ops.def with entries found (searched %s); using the stock ExecuTorch "
        "portable operator inventory with all dtypes allowed",
        [str(d) for d in kernel_dirs()],
    )
    ol = stock_executorch_oplist()
    ol.is_fallback = True
    return ol


def stock_executorch_oplist() -> OpList:
    """The operator inventory of stock ExecuTorch's portable + prim kernel libraries (all
    dtypes allowed): for exporting programs meant for stock ExecuTorch."""
    names = ["aten::" + n for n in _STOCK_FALLBACK.split()] + _STOCK_PRIM
    names += ["aten::_local_scalar_dense"]
    return OpList.from_names(names)
