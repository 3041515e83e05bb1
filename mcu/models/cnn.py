#!/usr/bin/env python3
"""cnn.py — a small CNN for Fashion-MNIST, trained, quantized to int8 and exported for the MCU.

    conv3x3 1->8, ReLU, maxpool 2, conv3x3 8->16, ReLU, maxpool 2, flatten, linear 400->10

(5,130 parameters). Trains on Fashion-MNIST (Debian `dataset-fashion-mnist`; --data takes any
directory of the four MNIST-format IDX files) for a few epochs on the CPU, reports eager fp32
test accuracy and the accuracy of every exported `.pte` run on Ember's C runtime (host) on the
full test set, and writes:

* OUT/cnn.pte              — fp32 (aten convolution / max_pool2d / addmm; stock portable kernels)
* OUT/cnn_int8.pte         — static int8 PTQ (ember.quant.quantize): Q/DQ operators, runs on
                             stock ExecuTorch portable + quantized kernels
* OUT/cnn_int8_fused.pte   — integer-only (ember.quant.fused.lower_to_integer):
                             ember::quantized_conv2d / quantized_max_pool2d / quantized_linear
* OUT/cnn_int8_in8.pte     — the same taking int8 input (pixel - 128): no float input buffer
* OUT/cnn_images.npy, cnn_images_int8.npy, cnn_labels.npy — the first N test images/labels
* OUT/cnn_int8_fused_expected.npy, cnn_int8_in8_expected.npy — bit-exact Python reference
  outputs for them (what the firmware must print)
* OUT/cnn_accuracy.txt     — the accuracy figures
* OUT/cnn_state.pt         — the trained weights, when trained here (mcu/models/cnn_state.pt,
                             the committed result of `--retrain` with the defaults, is used
                             otherwise)

    .venv/bin/python mcu/models/cnn.py --out build-mcu/models [--retrain] [--cases 8]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mlp import DEFAULT_DATA, load, train  # noqa: E402

log = logging.getLogger("cnn")


def cnn() -> nn.Sequential:
    """The network (NCHW input [N, 1, 28, 28] in [0, 1])."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 10),
    )  # fmt: skip


def runtime_predictions(path: Path, xs: torch.Tensor, desc: str) -> torch.Tensor:
    """Class predicted by Ember's C runtime (host) for every image of `xs`, one call each."""
    from tqdm import tqdm

    from ember.runtime import RuntimeProgram

    rt = RuntimeProgram(path)
    preds = torch.empty(len(xs), dtype=torch.int64)
    for i in tqdm(range(len(xs)), desc=desc, leave=False, disable=None):
        preds[i] = rt.run("forward", [xs[i : i + 1]])[0].argmax()
    return preds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--cases", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--retrain", action="store_true", help="train even if saved weights exist")
    ap.add_argument("--state", default=str(Path(__file__).with_name("cnn_state.pt")))
    ap.add_argument("--calib", type=int, default=1000, help="training images for int8 calibration")
    ap.add_argument("--observer", default="percentile", choices=["minmax", "percentile", "mse"])
    ap.add_argument("--eval", type=int, default=0, help="test images to evaluate (0: all)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    data = Path(args.data)
    xtr, ytr = load(data, "train")
    xte, yte = load(data, "test")
    xtr, xte = xtr.reshape(-1, 1, 28, 28), xte.reshape(-1, 1, 28, 28)
    if args.eval:
        xte, yte = xte[: args.eval], yte[: args.eval]
    model = cnn()
    state = Path(args.state) if Path(args.state).exists() else out / "cnn_state.pt"
    if state.exists() and not args.retrain:
        model.load_state_dict(torch.load(state))
        model.eval()
        log.info("loaded trained weights from %s", state)
    else:
        t0 = time.time()
        train(model, xtr, ytr, args.epochs, args.seed)
        state = out / "cnn_state.pt"
        torch.save(model.state_dict(), state)
        log.info("trained %d epochs in %.1f s", args.epochs, time.time() - t0)
    with torch.no_grad():
        eager_acc = (model(xte).argmax(1) == yte).float().mean().item()
    log.info("eager fp32 test accuracy %.4f", eager_acc)

    import ember
    import ember.quant
    import ember.quant.fused as fused
    from ember import _lib

    _lib.lib().em_register_quantized_kernels()  # not in the default registration

    def acc(preds: torch.Tensor) -> float:
        return (preds == yte).float().mean().item()

    pte = out / "cnn.pte"
    ember.export(model, (xte[:1],), backend=None).save(pte)
    ember_acc = acc(runtime_predictions(pte, xte, "fp32 on Ember"))
    log.info("Ember runtime (host) fp32 test accuracy %.4f on %d images", ember_acc, len(xte))

    g = torch.Generator().manual_seed(args.seed + 1)
    calib = list(xtr[torch.randperm(len(xtr), generator=g)[: args.calib]].split(100))
    qmodel = ember.quant.quantize(model, calib, observer=args.observer)
    with torch.no_grad():
        eager_q = acc(qmodel(xte).argmax(1))
    qpte = out / "cnn_int8.pte"
    ember.export(qmodel, (xte[:1],), backend=None).save(qpte)
    ember_q = acc(runtime_predictions(qpte, xte, "int8 Q/DQ on Ember"))
    log.info("int8 (Q/DQ) test accuracy: eager %.4f, Ember runtime %.4f", eager_q, ember_q)

    imodel = fused.lower_to_integer(qmodel, calib)
    with torch.no_grad():
        ref_preds = imodel(xte).argmax(1)
    ipte = out / "cnn_int8_fused.pte"
    ember.export(imodel, (xte[:1],), oplist=fused.oplist_with_fused(), backend=None).save(ipte)
    host_preds = runtime_predictions(ipte, xte, "int8 integer-only on Ember")
    eager_i, ember_i = acc(ref_preds), acc(host_preds)
    agree = (ref_preds == host_preds).float().mean().item()
    log.info("int8 integer-only test accuracy: Python reference %.4f, Ember runtime %.4f "
             "(same prediction on %.2f %% of images)", eager_i, ember_i, 100 * agree)  # fmt: skip
    n = args.cases
    with torch.no_grad():
        ref = torch.cat([imodel(xte[i : i + 1]) for i in range(n)])
    np.save(out / "cnn_int8_fused_expected.npy", ref.reshape(n, 1, 10).numpy())

    imodel8 = fused.lower_to_integer(qmodel, calib, int8_input=True)
    x8 = imodel8.quantize_input(xte)
    ember.export(imodel8, (x8[:1],), oplist=fused.oplist_with_fused(), backend=None).save(
        out / "cnn_int8_in8.pte"
    )
    with torch.no_grad():
        eager_i8 = acc(imodel8(x8).argmax(1))
        ref8 = torch.cat([imodel8(x8[i : i + 1]) for i in range(n)])
    np.save(out / "cnn_int8_in8_expected.npy", ref8.reshape(n, 1, 10).numpy())
    np.save(out / "cnn_images_int8.npy", x8[:n].numpy())
    np.save(out / "cnn_images.npy", xte[:n].numpy())
    np.save(out / "cnn_labels.npy", yte[:n].numpy())
    (out / "cnn_accuracy.txt").write_text(
        f"dataset {data}\nepochs {args.epochs} seed {args.seed}\n"
        f"eager fp32 test accuracy {eager_acc:.4f}\n"
        f"ember host fp32 test accuracy {ember_acc:.4f} ({len(xte)} images)\n"
        f"eager int8 (Q/DQ, {args.observer} observer, {args.calib} calibration images) test "
        f"accuracy {eager_q:.4f}\n"
        f"ember host int8 (Q/DQ) test accuracy {ember_q:.4f} ({len(xte)} images); "
        f"drop vs fp32 {100 * (ember_acc - ember_q):.2f} pp\n"
        f"python reference int8 integer-only test accuracy {eager_i:.4f}\n"
        f"ember host int8 integer-only test accuracy {ember_i:.4f}; "
        f"drop vs fp32 {100 * (ember_acc - ember_i):.2f} pp; same prediction as the Python "
        f"reference on {100 * agree:.2f} % of images\n"
        f"python reference int8-input integer-only (cnn_int8_in8.pte) test accuracy "
        f"{eager_i8:.4f}\n"
    )
    log.info("wrote %s and %d test cases", out, n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
