"""What the CPU backend's blob-version-18 lowerings buy on the corpus models they concern: each
model exported by ``ember.export`` (default path) as it is now and with those lowerings declined
(the instructions they take left on the portable kernels, as before them: splits / chunks /
unbinds, selects, cats of more than 4 inputs, sums, vector norms, flips, embeddings, nearest /
bilinear upsampling), run by ``ember.runtime.RuntimeProgram`` at 1 thread, interleaved rounds,
medians in ms. The models are the corpus's test sizes (tests/python/corpus): small, so per-operator
and per-delegate overhead weighs as much as arithmetic; ``--real`` measures three larger ones
instead (a bidirectional LSTM, a GPT-2, a decoder that upsamples).

    .venv/bin/python bench/generality_speed.py [--rounds 5] [--runs 40] [--models ...] [--real]
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

import ember
import ember.backends.cpu.partition as part
from ember.runtime import RuntimeProgram

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from corpus import CASES  # noqa: E402

log = logging.getLogger("generality_speed")

# The kernels lowered since blob version 18.
NEW = {
    "aten::split_with_sizes_copy.out",
    "aten::split_copy.Tensor_out",
    "aten::unbind_copy.int_out",
    "aten::select_copy.int_out",
    "aten::sum.IntList_out",
    "aten::linalg_vector_norm.out",
    "aten::embedding.out",
    "aten::flip.out",
    "aten::upsample_nearest2d.vec_out",
    "aten::upsample_bilinear2d.vec_out",
    "aten::as_strided_copy.out",
    "aten::index.Tensor_out",
    "aten::gather.out",
}
MODELS = [
    "lstm_bidir_2l",
    "gru_3l",
    "lstm_text",
    "gpt2",
    "bloom",
    "phi3",
    "bert",
    "t5_encoder",
    "wavlm",
    "convnextv2",
    "segformer",
    "upernet_convnext",
    "glpn",
    "dpt",
    "convbert",
    "swin",
]


class _Lstm(torch.nn.Module):
    """A 2-layer bidirectional LSTM, hidden 256, over 64 steps of 128 features."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTM(128, 256, num_layers=2, bidirectional=True, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


class _Gpt2(torch.nn.Module):
    """GPT-2's architecture (Hugging Face's GPT2Model): 4 layers, width 384, 64 tokens."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2Model

        cfg = GPT2Config(n_layer=4, n_embd=384, n_head=6, n_positions=128, vocab_size=8000)
        self.m = GPT2Model(cfg).eval()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.m(input_ids=ids).last_hidden_state


class _Decoder(torch.nn.Module):
    """A segmentation decoder's shape: 3x3 convs between bilinear 2x upsamplings, 32 -> 128 px,
    and a nearest-upsampled skip added at each scale."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(32, 32, 3, padding=1) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for c in self.convs:
            up = torch.nn.functional.interpolate(y, scale_factor=2, mode="bilinear")
            y = torch.relu(c(up)) + torch.nn.functional.interpolate(y, scale_factor=2)
        return y


def _real(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The larger models (``--real``): seeded weights and inputs."""
    torch.manual_seed(0)
    if name == "lstm_256x2_bidir":
        return _Lstm().eval(), (torch.randn(1, 64, 128),)
    if name == "gpt2_4x384":
        return _Gpt2().eval(), (torch.randint(0, 8000, (1, 64)),)
    return _Decoder().eval(), (torch.randn(1, 32, 16, 16),)


REAL = ["lstm_256x2_bidir", "gpt2_4x384", "decoder_bilinear"]


def _declining(real: Any) -> Any:
    """``lower`` as before these lowerings: the kernels of NEW, whatever now lowers to several
    ops (``parts``: cats of more than 4, mean / sum over non-adjacent dims, flips of several
    dims, vector norms, transposed convs) or to the new kinds (adaptive pools of uneven
    windows, gathers), and pads of dims before unpadded ones, declined."""

    def lower(ins: Any, only_here: Any) -> Any:
        op = real(ins, only_here)
        if (
            ins.kernel in NEW
            or op.kind in ("parts", "resize", "gather", "embedding")
            or (op.kind == "pad" and not op.attrs.get("last_two"))
        ):
            raise part.Unsupported(f"{ins.kernel} (declined for the comparison)")
        return op

    return lower


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        name = next(
            line.split(":", 1)[1].strip()
            for line in out.splitlines()
            if line.startswith("Model name")
        )
    except (OSError, subprocess.CalledProcessError, StopIteration):
        name = platform.processor() or "unknown"
    return name


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--real", action="store_true", help=f"the larger models instead: {REAL}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("ember").setLevel(logging.WARNING)
    rows = []
    real = part.lower
    for name in REAL if args.real else args.models:
        m, inputs = _real(name) if args.real else CASES[name].build()
        progs: dict[str, Any] = {}
        for arm in ("before", "after"):
            part.lower = _declining(real) if arm == "before" else real
            try:
                progs[arm] = ember.export(m, inputs)
            finally:
                part.lower = real
        outside = {
            arm: sum(not d.delegated for d in p._irs["forward"].partition_report)
            for arm, p in progs.items()
        }
        rts = {arm: RuntimeProgram(p.buffer, threads=1) for arm, p in progs.items()}
        xs = list(inputs)
        with torch.no_grad():
            want = m(*inputs)
        want = want[0] if isinstance(want, (tuple, list)) else want
        err = {}
        for arm, rt in rts.items():
            got = rt.run("forward", xs)[0]
            err[arm] = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
            for _ in range(3):
                rt.run("forward", xs)
        times: dict[str, list[float]] = {arm: [] for arm in rts}
        for _ in range(args.rounds):
            for arm, rt in rts.items():
                ts = []
                for _ in range(args.runs):
                    t0 = time.perf_counter()
                    rt.run("forward", xs)
                    ts.append(time.perf_counter() - t0)
                times[arm].append(statistics.median(ts) * 1e3)
        med = {arm: statistics.median(v) for arm, v in times.items()}
        rows.append(
            (name, outside["before"], outside["after"], med["before"], med["after"], err["after"])
        )
        log.info("%s: %.3f -> %.3f ms", name, med["before"], med["after"])
    lines = [
        f"CPU: {_cpu()}, 1 thread; {args.rounds} interleaved rounds of {args.runs} runs, "
        "medians of the rounds' medians (ms, RuntimeProgram.run from Python: its call cost of "
        "~10-20 us is in both).",
        "",
        "| model | outside before | outside after | before ms | after ms | after / before "
        "| rel. err after |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n, ob, oa, b, a, e in rows:
        lines.append(f"| {n} | {ob} | {oa} | {b:.3f} | {a:.3f} | {a / b:.2f} | {e:.1e} |")
    text = "\n".join(lines)
    log.info("\n%s", text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
