"""Int8 accuracy on real data (issue 31 item 4), shared by ``test_quant_accuracy.py`` and
``bench/quant_accuracy.py``: fp32 eager PyTorch against the int8 program (``ember.quant``'s
``quantize_exported``, exported with ``ember.export``'s default backend, EmberCpuBackend, and run
on Ember's C runtime, one thread) on real trained weights and real inputs that are available
offline:

* EfficientNet-Lite0 (ImageNet weights, :mod:`zoo.models`), static int8, on the photographs that
  ship with scikit-image (:func:`photographs`). Calibration: random crops (scale, position and
  mirroring drawn from a seeded generator) of every photograph; evaluation: four fixed views of
  each photograph (whole, mirrored, central 80 % crop, mirrored crop), none of which is a
  calibration input. Figures: top-1 agreement with fp32, mean top-5 overlap, the cat photograph's
  class.
* all-MiniLM-L6-v2 (:mod:`zoo.models`), dynamic int8 linears, on ``examples/demo.py``'s query and
  candidate sentences: cosine of each int8 sentence embedding with the fp32 one, and the ranking
  of all sentence pairs by similarity, int8 against fp32.
* The MCU CNN (``mcu/models/cnn.py``, committed trained weights ``cnn_state.pt``) on
  Fashion-MNIST (Debian ``dataset-fashion-mnist``, installed by ``make mcu-deps``), static int8
  calibrated on training images: test accuracy of fp32 and int8.

Each ``*_figures`` function returns a small dataclass of the measured figures.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

import ember
from ember.quant.pt2e import quantize_exported, summarize
from ember.runtime import RuntimeProgram

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def _load(name: str, path: Path) -> Any:
    """Imports the file `path` as module `name` once (shared with other importers of it)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def zoo() -> Any:
    """``tests/python/zoo/models.py`` (under the name test_zoo.py gives it)."""
    return _load("ember_zoo_models", REPO / "tests" / "python" / "zoo" / "models.py")


def _int8_runner(ep: torch.export.ExportedProgram, inputs: tuple[torch.Tensor, ...]) -> Any:
    """The int8 program on Ember's runtime (default backend, one thread): a function of the
    inputs returning the first output."""
    prog = ember.export(ep, inputs)
    rt = RuntimeProgram(prog.buffer, threads=1)

    def run(*xs: torch.Tensor) -> torch.Tensor:
        return rt.run("forward", list(xs))[0]

    return run


# -------------------------------------------------------------------------- EfficientNet-Lite0

#: Colour photographs in scikit-image's distribution (no download), and grey-level ones, used as
#: RGB with three equal channels.
COLOUR_PHOTOS = (
    "chelsea",
    "coffee",
    "astronaut",
    "rocket",
    "stereo_motorcycle",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
)
GREY_PHOTOS = ("camera", "coins", "moon", "clock")
IMAGENET_CATS = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat
SIZE = 224


def photographs() -> dict[str, torch.Tensor]:
    """Every photograph as a float [3, H, W] tensor in [0, 1] (full resolution)."""
    import skimage.data

    out = {}
    for name in COLOUR_PHOTOS + GREY_PHOTOS:
        a = getattr(skimage.data, name)()
        if isinstance(a, tuple):  # stereo_motorcycle: (left, right, disparity)
            a = a[0]
        t = torch.from_numpy(a.copy()).float() / 255.0
        t = t.expand(3, *t.shape) if t.dim() == 2 else t.permute(2, 0, 1)[:3]
        out[name] = t.contiguous()
    return out


def _normalise(img: torch.Tensor) -> torch.Tensor:
    """A [3, h, w] crop resized (bilinear, antialiased) to SIZE and normalised: [1, 3, S, S]."""
    z = zoo()
    mean = torch.tensor(z.EFFICIENTNET_MEAN)[:, None, None]
    std = torch.tensor(z.EFFICIENTNET_STD)[:, None, None]
    x = nn.functional.interpolate(img[None], size=(SIZE, SIZE), mode="bilinear", antialias=True)
    return (x - mean) / std


def _crop(img: torch.Tensor, frac: float, cy: float = 0.5, cx: float = 0.5) -> torch.Tensor:
    """A square crop of side `frac` x the short side, centred at (`cy`, `cx`) of the free room."""
    _, h, w = img.shape
    s = max(1, int(round(frac * min(h, w))))
    y0, x0 = int(round(cy * (h - s))), int(round(cx * (w - s)))
    return img[:, y0 : y0 + s, x0 : x0 + s]


def eval_views(photos: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Four fixed views of each photograph: whole (short side, centred), mirrored, central 80 %
    crop, mirrored central crop."""
    out = {}
    for name, img in photos.items():
        whole, crop = _crop(img, 1.0), _crop(img, 0.8)
        out[f"{name}"] = _normalise(whole)
        out[f"{name}/flip"] = _normalise(whole.flip(-1))
        out[f"{name}/crop"] = _normalise(crop)
        out[f"{name}/crop+flip"] = _normalise(crop.flip(-1))
    return out


def calibration_crops(
    photos: dict[str, torch.Tensor], per_photo: int, seed: int = 0
) -> torch.Tensor:
    """`per_photo` random crops of every photograph (side 50-95 % of the short side, random
    position, mirrored half of the time): [n, 3, S, S]."""
    g = torch.Generator().manual_seed(seed)
    xs = []
    for img in photos.values():
        for _ in range(per_photo):
            frac, cy, cx, flip = torch.rand(4, generator=g).tolist()
            c = _crop(img, 0.5 + 0.45 * frac, cy, cx)
            xs.append(_normalise(c.flip(-1) if flip < 0.5 else c))
    return torch.cat(xs)


@dataclass
class ImageFigures:
    n: int  # evaluation views
    top1_agree: float  # share of views whose int8 top-1 class is fp32's
    top5_overlap: float  # mean |top5(int8) & top5(fp32)| / 5
    sqnr_db: float  # mean over views of 10 log10(|fp32 logits|^2 / |int8 - fp32 logits|^2)
    cat_fp32: int  # top-1 class of the cat photograph (chelsea, whole), fp32
    cat_int8: int
    coffee_int8: int  # top-1 class of the coffee photograph (whole), int8
    q_pairs: int  # activation quantize nodes in the int8 graph
    disagree: list[str] = field(default_factory=list)  # "view: fp32 class (prob) -> int8 class"


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """PyTorch on `n` intra-op threads inside the block (the machines running the tests are
    small and shared: more threads than cores only slow eager PyTorch down)."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def efficientnet_figures(calib_per_photo: int = 2, batch: int = 12) -> ImageFigures:
    """Static int8 (min/max observer) calibrated on `calib_per_photo` random crops of every
    photograph, evaluated on :func:`eval_views` in batches of `batch` (the program's batch)."""
    model, _ = zoo().efficientnet_lite0()
    photos = photographs()
    views = eval_views(photos)
    names, x = list(views), torch.cat(list(views.values()))
    calib = calibration_crops(photos, calib_per_photo)
    example = (x[:batch],)
    with _threads(1):
        with torch.no_grad():
            want = torch.cat([model(b) for b in x.split(batch)])
        ep = quantize_exported(model, example, list(calib.split(batch)), progress=False)
        run = _int8_runner(ep, example)
        got = torch.cat([run(b) for b in x.split(batch)])
    w5, g5 = want.topk(5).indices, got.topk(5).indices
    prob = want.softmax(-1).max(-1).values
    agree = w5[:, 0] == g5[:, 0]
    common = [len(set(a.tolist()) & set(b.tolist())) for a, b in zip(w5, g5, strict=True)]
    overlap = sum(common) / 5 / len(names)
    sqnr = 10 * torch.log10(want.pow(2).sum(-1) / (got - want).pow(2).sum(-1))
    disagree = [f"{names[i]}: {int(w5[i, 0])} ({float(prob[i]):.2f}) -> {int(g5[i, 0])}"
                for i in range(len(names)) if not agree[i]]  # fmt: skip
    i_cat, i_coffee = names.index("chelsea"), names.index("coffee")
    return ImageFigures(
        n=len(names),
        top1_agree=float(agree.float().mean()),
        top5_overlap=overlap,
        sqnr_db=float(sqnr.mean()),
        cat_fp32=int(w5[i_cat, 0]),
        cat_int8=int(g5[i_cat, 0]),
        coffee_int8=int(g5[i_coffee, 0]),
        q_pairs=summarize(ep).quantize,
        disagree=disagree,
    )


# -------------------------------------------------------------------------- all-MiniLM-L6-v2


def demo_sentences() -> list[str]:
    """``examples/demo.py``'s query followed by its candidate sentences."""
    demo = _load("ember_demo", REPO / "examples" / "demo.py")
    return [demo.QUERY, *demo.CANDIDATES]


@dataclass
class SentenceFigures:
    n: int  # sentences
    min_cos: float  # min over sentences of cos(int8 embedding, fp32 embedding)
    pairs: int  # sentence pairs
    same_query_ranking: bool  # the demo's candidates ranked against its query: int8 == fp32
    swapped: int  # pairs of sentence pairs whose similarity order int8 swaps
    max_swapped_gap: float  # the largest fp32 similarity gap among the swapped ones (0: none)
    max_sim_diff: float  # max over sentence pairs of |sim int8 - sim fp32|
    q_nodes: int  # dynamic (per-token) quantize nodes in the int8 graph


def _pair_sims(e: torch.Tensor) -> torch.Tensor:
    i, j = torch.triu_indices(len(e), len(e), offset=1)
    return (e[i] * e[j]).sum(-1)


def minilm_figures() -> SentenceFigures:
    """Dynamic int8 linears (no calibration) on :func:`demo_sentences`."""
    from transformers import AutoTokenizer

    z = zoo()
    model, _ = z.minilm()
    sentences = demo_sentences()
    tok = AutoTokenizer.from_pretrained(z.minilm_dir())
    b = tok(sentences, padding="max_length", max_length=z.MINILM_SEQ, truncation=True,
            return_tensors="pt")  # fmt: skip
    inputs = (b["input_ids"], b["attention_mask"])
    with _threads(1):
        ep = quantize_exported(model, inputs, dynamic=True, progress=False)
        got = _int8_runner(ep, inputs)(*inputs).double()
        with torch.no_grad():
            want = model(*inputs).double()
    cos = nn.functional.cosine_similarity(got, want, dim=-1)
    sg, sw = _pair_sims(got), _pair_sims(want)
    # every two sentence pairs (a, b): does int8 order them as fp32 does?
    a, c = torch.triu_indices(len(sw), len(sw), offset=1)
    swapped = torch.sign(sg[a] - sg[c]) != torch.sign(sw[a] - sw[c])
    gaps = (sw[a] - sw[c]).abs()[swapped]
    return SentenceFigures(
        n=len(sentences),
        min_cos=float(cos.min()),
        pairs=len(sw),
        same_query_ranking=(got[1:] @ got[0]).argsort().tolist()
        == (want[1:] @ want[0]).argsort().tolist(),
        swapped=int(swapped.sum()),
        max_swapped_gap=float(gaps.max()) if len(gaps) else 0.0,
        max_sim_diff=float((sg - sw).abs().max()),
        q_nodes=summarize(ep).quantize,
    )


# -------------------------------------------------------------------------- Fashion-MNIST CNN


@dataclass
class FashionFigures:
    n: int
    acc_fp32: float
    acc_int8: float
    agree: float  # share of test images with the same predicted class
    sqnr_db: float  # 10 log10(|fp32 logits|^2 / |int8 - fp32 logits|^2) over all images
    q_pairs: int


def fashion_figures(n_test: int = 2000, n_calib: int = 1000, batch: int = 500) -> FashionFigures:
    """The MCU CNN on the first `n_test` Fashion-MNIST test images; int8 calibrated (min/max) on
    `n_calib` training images drawn with a seeded generator."""
    mcu = REPO / "mcu" / "models"
    mlp_mod = _load("ember_mcu_mlp", mcu / "mlp.py")
    cnn_mod = _load("ember_mcu_cnn", mcu / "cnn.py")
    xtr, _ = mlp_mod.load(FASHION_MNIST, "train")
    xte, yte = mlp_mod.load(FASHION_MNIST, "test")
    g = torch.Generator().manual_seed(1)
    calib = xtr[torch.randperm(len(xtr), generator=g)[:n_calib]].reshape(-1, 1, 28, 28)
    xte, yte = xte[:n_test].reshape(-1, 1, 28, 28), yte[:n_test]
    model = cnn_mod.cnn()
    model.load_state_dict(torch.load(mcu / "cnn_state.pt", weights_only=True))
    model.eval()
    example = (xte[:batch],)
    with _threads(1):
        ep = quantize_exported(model, example, list(calib.split(batch)), progress=False)
        run = _int8_runner(ep, example)
        with torch.no_grad():
            l32 = model(xte)
        l8 = torch.cat([run(x) for x in xte.split(batch)])
    p32, p8 = l32.argmax(1), l8.argmax(1)
    sqnr = 10 * torch.log10(l32.pow(2).sum() / (l8 - l32).pow(2).sum())
    return FashionFigures(
        n=len(yte),
        acc_fp32=float((p32 == yte).float().mean()),
        acc_int8=float((p8 == yte).float().mean()),
        agree=float((p8 == p32).float().mean()),
        sqnr_db=float(sqnr),
        q_pairs=summarize(ep).quantize,
    )
