"""Vision cases: CNNs, vision transformers and hybrids, detection / segmentation / depth heads."""

from __future__ import annotations

import transformers as tf

from .registry import HF, Built, case, image

VIT = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    image_size=32,
    patch_size=8,
    num_labels=10,
)


# -- CNNs ---------------------------------------------------------------------------------------
@case("cnn", fast=True)
def resnet() -> Built:
    cfg = tf.ResNetConfig(
        embedding_size=16,
        hidden_sizes=[16, 32, 48],
        depths=[1, 1, 1],
        layer_type="bottleneck",
        num_labels=10,
    )
    return HF(tf.ResNetForImageClassification(cfg)), image(64)


@case("cnn")
def resnet_basic() -> Built:
    cfg = tf.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[2, 1], layer_type="basic", num_labels=10
    )
    return HF(tf.ResNetForImageClassification(cfg)), image(64)


@case("cnn")
def mobilenet_v1() -> Built:
    cfg = tf.MobileNetV1Config(depth_multiplier=0.25, image_size=64, num_labels=10)
    return HF(tf.MobileNetV1ForImageClassification(cfg)), image(64)


@case("cnn")
def mobilenet_v2() -> Built:
    cfg = tf.MobileNetV2Config(depth_multiplier=0.25, image_size=64, num_labels=10)
    return HF(tf.MobileNetV2ForImageClassification(cfg)), image(64)


@case("cnn")
def efficientnet() -> Built:
    cfg = tf.EfficientNetConfig(
        image_size=64,
        width_coefficient=0.25,
        depth_coefficient=0.2,
        hidden_dim=320,
        num_labels=10,
    )
    return HF(tf.EfficientNetForImageClassification(cfg)), image(64)


@case("cnn", fast=True)
def convnext() -> Built:
    cfg = tf.ConvNextConfig(
        num_stages=2,
        hidden_sizes=[16, 32],
        depths=[1, 2],
        layer_scale_init_value=0.5,
        num_labels=10,
    )
    return HF(tf.ConvNextForImageClassification(cfg)), image(64)


@case("cnn")
def convnextv2() -> Built:
    cfg = tf.ConvNextV2Config(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)
    return HF(tf.ConvNextV2ForImageClassification(cfg)), image(64)


@case("cnn")
def regnet() -> Built:
    cfg = tf.RegNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 2], groups_width=8, num_labels=10
    )
    return HF(tf.RegNetForImageClassification(cfg)), image(64)


@case("cnn")
def bit() -> Built:
    # Weight-standardized convs, group norm.
    cfg = tf.BitConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_groups=4, num_labels=10
    )
    return HF(tf.BitForImageClassification(cfg)), image(64)


@case("cnn")
def poolformer() -> Built:
    cfg = tf.PoolFormerConfig(
        hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1], num_encoder_blocks=4, num_labels=10
    )
    return HF(tf.PoolFormerForImageClassification(cfg)), image(64)


@case("cnn")
def focalnet() -> Built:
    cfg = tf.FocalNetConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_labels=10)
    return HF(tf.FocalNetForImageClassification(cfg)), image(32)


# -- vision transformers and hybrids -------------------------------------------------------------
@case("vit")
def vit() -> Built:
    return HF(tf.ViTForImageClassification(tf.ViTConfig(**VIT))), image(32)


@case("vit")
def deit() -> Built:
    cfg = tf.DeiTConfig(**VIT)
    return HF(tf.DeiTForImageClassificationWithTeacher(cfg)), image(32)


@case("vit")
def beit() -> Built:
    cfg = tf.BeitConfig(**VIT, use_relative_position_bias=True, use_mean_pooling=True)
    return HF(tf.BeitForImageClassification(cfg)), image(32)


@case("vit")
def dinov2() -> Built:
    cfg = tf.Dinov2Config(**{**VIT, "patch_size": 4}, layerscale_value=0.5)
    return HF(tf.Dinov2Model(cfg)), image(32)


@case("vit", fast=True)
def swin() -> Built:
    cfg = tf.SwinConfig(
        image_size=32,
        patch_size=2,
        embed_dim=16,
        depths=[1, 1],
        num_heads=[2, 4],
        window_size=4,
        num_labels=10,
    )
    return HF(tf.SwinForImageClassification(cfg)), image(32)


@case("vit")
def swinv2() -> Built:
    cfg = tf.Swinv2Config(
        image_size=32,
        patch_size=2,
        embed_dim=16,
        depths=[1, 1],
        num_heads=[2, 4],
        window_size=4,
        num_labels=10,
    )
    return HF(tf.Swinv2ForImageClassification(cfg)), image(32)


@case("vit")
def levit() -> Built:
    cfg = tf.LevitConfig(
        image_size=64,
        hidden_sizes=[32, 48, 64],
        num_attention_heads=[2, 3, 4],
        depths=[1, 1, 1],
        key_dim=[8, 8, 8],
        num_labels=10,
    )
    return HF(tf.LevitForImageClassification(cfg)), image(64)


@case("vit")
def mobilevit() -> Built:
    cfg = tf.MobileViTConfig(
        image_size=64,
        hidden_sizes=[32, 40, 48],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
        num_labels=10,
    )
    return HF(tf.MobileViTForImageClassification(cfg)), image(64)


@case("vit")
def mobilevitv2() -> Built:
    cfg = tf.MobileViTV2Config(image_size=64, width_multiplier=0.25, num_labels=10)
    return HF(tf.MobileViTV2ForImageClassification(cfg)), image(64)


@case("vit")
def cvt() -> Built:
    cfg = tf.CvtConfig(
        embed_dim=[16, 24, 32],
        num_heads=[1, 2, 2],
        depth=[1, 2, 3],
        mlp_ratio=[2.0] * 3,
        drop_path_rate=[0.0] * 3,
        num_labels=10,
    )
    return HF(tf.CvtForImageClassification(cfg)), image(32)


@case("vit")
def pvt_v2() -> Built:
    cfg = tf.PvtV2Config(
        hidden_sizes=[16, 32],
        depths=[1, 1],
        num_encoder_blocks=2,
        num_attention_heads=[1, 2],
        sr_ratios=[2, 1],
        patch_sizes=[7, 3],
        strides=[4, 2],
        mlp_ratios=[2, 2],
        num_labels=10,
    )
    return HF(tf.PvtV2ForImageClassification(cfg)), image(64)


# -- dense heads: segmentation, depth, detection --------------------------------------------------
@case("dense", fast=True)
def segformer() -> Built:
    cfg = tf.SegformerConfig(
        hidden_sizes=[16, 32],
        depths=[1, 1],
        num_encoder_blocks=2,
        num_attention_heads=[1, 2],
        sr_ratios=[2, 1],
        decoder_hidden_size=32,
        num_labels=5,
    )
    return HF(tf.SegformerForSemanticSegmentation(cfg)), image(64)


@case("dense")
def upernet_convnext() -> Built:
    backbone = tf.ConvNextConfig(
        hidden_sizes=[16, 32, 48, 64],
        depths=[1, 1, 1, 1],
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    cfg = tf.UperNetConfig(
        backbone_config=backbone,
        hidden_size=32,
        auxiliary_in_channels=48,
        num_labels=5,
        use_auxiliary_head=False,
    )
    return HF(tf.UperNetForSemanticSegmentation(cfg)), image(64)


@case("dense")
def dpt() -> Built:
    cfg = tf.DPTConfig(
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        backbone_out_indices=[0, 1, 2, 3],
        neck_hidden_sizes=[8, 16, 24, 32],
        fusion_hidden_size=16,
        head_in_index=-1,
        initializer_range=0.2,
    )
    return HF(tf.DPTForDepthEstimation(cfg), key="predicted_depth"), image(32)


@case("dense")
def glpn() -> Built:
    cfg = tf.GLPNConfig(
        hidden_sizes=[16, 32, 48, 64],
        depths=[1, 1, 1, 1],
        num_attention_heads=[1, 2, 2, 4],
        decoder_hidden_size=16,
    )
    return HF(tf.GLPNForDepthEstimation(cfg), key="predicted_depth"), image(64)


@case("dense")
def yolos() -> Built:
    cfg = tf.YolosConfig(**{**VIT, "image_size": [32, 32], "num_labels": 5}, num_detection_tokens=5)
    return HF(tf.YolosForObjectDetection(cfg), key="logits"), image(32)
