#!/usr/bin/env python3
"""mlp.py — the ExecuTorch paper's microcontroller MLP (784-32-16-10), trained and exported.

Trains on Fashion-MNIST (Debian `dataset-fashion-mnist`, /usr/share/datasets/fashion-mnist; any
directory of the four MNIST-format IDX files works with --data, e.g. real MNIST) for a few epochs
on the CPU, reports eager fp32 test accuracy and the accuracy of the exported `.pte` run on Ember's
C runtime (host), and writes:

* OUT/mlp.pte            — batch-1 program for the firmware
* OUT/mlp_images.npy     — the first N test images, [N, 1, 784] f32 (firmware test cases)
* OUT/mlp_labels.npy     — their labels, [N] i64
* OUT/mlp_int8.pte       — the same network after static int8 PTQ (ember.quant: per-channel
                           int8 weights, per-tensor int8 activations, Q/DQ operators)
* OUT/mlp_int8_fused.pte — integer-only: ember.quant.fused.lower_to_integer (int8 activations end
                           to end, ember::quantized_linear with int32 accumulation and
                           fixed-point requantization); OUT/mlp_int8_fused_expected.npy holds the
                           bit-exact Python reference outputs of the test cases
* OUT/mlp_int8_in8.pte   — the same, taking int8 input (pixel - 128; OUT/mlp_images_int8.npy,
                           OUT/mlp_int8_in8_expected.npy): no float input buffer, no Q kernel
* OUT/mlp_state.pt       — the trained weights, when trained here (mcu/models/mlp_state.pt, the
                           committed result of `--retrain` with the defaults, is used otherwise)
* OUT/mlp_accuracy.txt   — the accuracy figures (fp32 and int8, eager and on Ember's runtime)

The deployed module keeps each weight pre-transposed ([in, out]) and calls addmm, so the `.pte`
needs no run-time transpose of constants (a transposed copy of the 784x32 weight would cost 100
KiB of planned RAM): the program's planned arena is just the activations.

    .venv/bin/python mcu/models/mlp.py --out build-mcu/models [--epochs 4] [--cases 8]
"""

from __future__ import annotations

import argparse
import gzip
import logging
import struct
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

DEFAULT_DATA = Path("/usr/share/datasets/fashion-mnist")


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip or plain) as a numpy array."""
    data = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    zero, dtype, ndim = struct.unpack_from(">HBB", data, 0)
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack_from(f">{ndim}I", data, 4)
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load(data_dir: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Images as [n, 784] floats in [0, 1] and labels as int64."""
    prefix = "train" if split == "train" else "t10k"

    def find(kind: str) -> Path:
        for name in (f"{prefix}-{kind}-idx{3 if kind == 'images' else 1}-ubyte.gz",
                     f"{prefix}-{kind}-idx{3 if kind == 'images' else 1}-ubyte"):  # fmt: skip
            if (data_dir / name).exists():
                return data_dir / name
        raise FileNotFoundError(f"no {prefix} {kind} IDX file in {data_dir}")

    x = torch.from_numpy(read_idx(find("images")).astype(np.float32) / 255.0).reshape(-1, 784)
    y = torch.from_numpy(read_idx(find("labels")).astype(np.int64))
    return x, y


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(),
                         nn.Linear(16, 10))  # fmt: skip


class DeployMLP(nn.Module):
    """The same network with [in, out] weights: forward is addmm (+ relu) per layer."""

    def __init__(self, layers: list[nn.Linear]) -> None:
        super().__init__()
        self.w = nn.ParameterList(
            [nn.Parameter(lin.weight.detach().t().contiguous()) for lin in layers]
        )
        self.b = nn.ParameterList([nn.Parameter(lin.bias.detach().clone()) for lin in layers])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(len(self.w)):
            x = torch.addmm(self.b[i], x, self.w[i])
            if i < len(self.w) - 1:
                x = torch.relu(x)
        return x


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    model.train()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    for ep in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        batches = range(0, len(x), 256)
        it = (
            tqdm(batches, desc=f"epoch {ep + 1}/{epochs}", leave=False, disable=None)
            if tqdm
            else batches
        )
        for i in it:
            idx = perm[i : i + 256]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--cases", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--retrain", action="store_true", help="train even if saved weights exist")
    ap.add_argument(
        "--state",
        default=str(Path(__file__).with_name("mlp_state.pt")),
        help="trained weights to start from (committed; OUT/mlp_state.pt if absent)",
    )
    ap.add_argument("--calib", type=int, default=1000, help="training images for int8 calibration")
    ap.add_argument("--observer", default="percentile", choices=["minmax", "percentile"])
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    log = logging.getLogger("mlp")
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    data = Path(args.data)
    xtr, ytr = load(data, "train")
    xte, yte = load(data, "test")
    model = mlp()
    state = Path(args.state) if Path(args.state).exists() else out / "mlp_state.pt"
    if state.exists() and not args.retrain:
        model.load_state_dict(torch.load(state))
        model.eval()
        log.info("loaded trained weights from %s", state)
    else:
        t0 = time.time()
        train(model, xtr, ytr, args.epochs, args.seed)
        state = out / "mlp_state.pt"
        torch.save(model.state_dict(), state)
        log.info("trained %d epochs in %.1f s", args.epochs, time.time() - t0)
    with torch.no_grad():
        eager_acc = (model(xte).argmax(1) == yte).float().mean().item()
    log.info("eager fp32 test accuracy %.4f", eager_acc)

    import ember

    deploy = DeployMLP([model[0], model[2], model[4]]).eval()
    prog = ember.export(deploy, (xte[:1],), backend=None)
    pte = out / "mlp.pte"
    prog.save(pte)

    from ember.runtime import RuntimeProgram

    def runtime_accuracy(path: Path) -> float:
        rt = RuntimeProgram(path)
        correct = 0
        for i in range(len(xte)):
            y = rt.run("forward", [xte[i : i + 1]])[0]
            correct += int(y.argmax().item() == yte[i].item())
        return correct / len(xte)

    ember_acc = runtime_accuracy(pte)
    log.info("Ember runtime (host) fp32 test accuracy %.4f on %d images", ember_acc, len(xte))

    import ember.quant

    g = torch.Generator().manual_seed(args.seed + 1)
    calib = xtr[torch.randperm(len(xtr), generator=g)[: args.calib]]
    qmodel = ember.quant.quantize(model, list(calib.split(100)), observer=args.observer)
    with torch.no_grad():
        eager_q = (qmodel(xte).argmax(1) == yte).float().mean().item()
    qpte = out / "mlp_int8.pte"
    ember.export(qmodel, (xte[:1],), backend=None).save(qpte)
    ember_q = runtime_accuracy(qpte)
    log.info("int8 (Q/DQ) test accuracy: eager %.4f, Ember runtime %.4f", eager_q, ember_q)

    # Integer-only lowering: int8 activations end to end, ember::quantized_linear kernels.
    import ember.quant.fused as fused

    imodel = fused.lower_to_integer(qmodel, list(calib.split(100)))
    with torch.no_grad():
        eager_i = (imodel(xte).argmax(1) == yte).float().mean().item()
    ipte = out / "mlp_int8_fused.pte"
    ember.export(imodel, (xte[:1],), oplist=fused.oplist_with_fused(), backend=None).save(ipte)
    with torch.no_grad():
        ref = torch.cat([imodel(xte[i : i + 1]) for i in range(args.cases)])
    np.save(out / "mlp_int8_fused_expected.npy", ref.reshape(args.cases, 1, 10).numpy())
    ember_i = float("nan")
    try:
        from ember import _lib

        _lib.lib().em_register_quantized_kernels()  # not in the default registration
        ember_i = runtime_accuracy(ipte)
    except (AttributeError, OSError) as e:
        log.warning("cannot run %s on the host runtime: %s", ipte, e)
    log.info("int8 integer-only test accuracy: eager %.4f, Ember runtime %.4f", eager_i, ember_i)

    # The same network taking int8 input (pixel - 128): no float input buffer, no Q kernel.
    imodel8 = fused.lower_to_integer(qmodel, list(calib.split(100)), int8_input=True)
    x8 = imodel8.quantize_input(xte)
    with torch.no_grad():
        eager_i8 = (imodel8(x8).argmax(1) == yte).float().mean().item()
    ember.export(imodel8, (x8[:1],), oplist=fused.oplist_with_fused(), backend=None).save(
        out / "mlp_int8_in8.pte"
    )
    np.save(out / "mlp_images_int8.npy", x8[: args.cases].reshape(args.cases, 1, 784).numpy())
    with torch.no_grad():
        ref8 = torch.cat([imodel8(x8[i : i + 1]) for i in range(args.cases)])
    np.save(out / "mlp_int8_in8_expected.npy", ref8.reshape(args.cases, 1, 10).numpy())
    log.info("int8-input integer-only test accuracy: eager %.4f", eager_i8)

    np.save(out / "mlp_images.npy", xte[: args.cases].reshape(args.cases, 1, 784).numpy())
    np.save(out / "mlp_labels.npy", yte[: args.cases].numpy())
    (out / "mlp_accuracy.txt").write_text(
        f"dataset {data}\nepochs {args.epochs} seed {args.seed}\n"
        f"eager fp32 test accuracy {eager_acc:.4f}\n"
        f"ember host fp32 test accuracy {ember_acc:.4f} ({len(xte)} images)\n"
        f"eager int8 (Q/DQ, {args.observer} observer, {args.calib} calibration images) test "
        f"accuracy {eager_q:.4f}\n"
        f"ember host int8 test accuracy {ember_q:.4f} ({len(xte)} images); "
        f"drop vs fp32 {100 * (ember_acc - ember_q):.2f} pp\n"
        f"eager int8 integer-only (ember::quantized_linear) test accuracy {eager_i:.4f}\n"
        f"ember host int8 integer-only test accuracy {ember_i:.4f}; "
        f"drop vs fp32 {100 * (ember_acc - ember_i):.2f} pp\n"
        f"eager int8-input integer-only (mlp_int8_in8.pte) test accuracy {eager_i8:.4f}\n"
    )
    log.info("wrote %s (%d bytes) and %d test cases", pte, pte.stat().st_size, args.cases)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
