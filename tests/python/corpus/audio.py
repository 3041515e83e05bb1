"""Audio cases: wav2vec2-family encoders (conv feature extractor, GroupNorm / LayerNorm, weight-
normed positional convolution), the Whisper encoder and the Audio Spectrogram Transformer."""

from __future__ import annotations

import torch
import transformers as tf

from .registry import HF, Built, case

W2V = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    conv_dim=(16, 16, 16),
    conv_stride=(5, 2, 2),
    conv_kernel=(10, 3, 3),
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=4,
)


def wave(n: int = 800) -> tuple[torch.Tensor]:
    return (torch.randn(1, n),)


@case("audio")
def wav2vec2() -> Built:
    return HF(tf.Wav2Vec2Model(tf.Wav2Vec2Config(**W2V)), "input_values"), wave()


@case("audio")
def wav2vec2_layer_norm() -> Built:
    cfg = tf.Wav2Vec2Config(**W2V, feat_extract_norm="layer", do_stable_layer_norm=True)
    return HF(tf.Wav2Vec2ForCTC(cfg), "input_values"), wave()


@case("audio")
def hubert() -> Built:
    return HF(tf.HubertModel(tf.HubertConfig(**W2V)), "input_values"), wave()


@case("audio")
def wavlm() -> Built:
    cfg = tf.WavLMConfig(**W2V, num_buckets=16, max_bucket_distance=32)
    return HF(tf.WavLMModel(cfg), "input_values"), wave()


@case("audio")
def data2vec_audio() -> Built:
    cfg = tf.Data2VecAudioConfig(**{**W2V, "num_conv_pos_embeddings": 5}, conv_pos_kernel_size=5)
    return HF(tf.Data2VecAudioModel(cfg), "input_values"), wave()


@case("audio")
def sew() -> Built:
    cfg = tf.SEWConfig(**W2V, squeeze_factor=2)
    return HF(tf.SEWModel(cfg), "input_values"), wave(1600)


@case("audio", fast=True)
def whisper_encoder() -> Built:
    cfg = tf.WhisperConfig(
        vocab_size=99,
        num_mel_bins=8,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=16,
        max_target_positions=32,
        pad_token_id=1,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=3,
    )
    enc = tf.WhisperModel(cfg).get_encoder()
    return HF(enc, "input_features"), (torch.randn(1, 8, 32),)


@case("audio")
def ast() -> Built:
    cfg = tf.ASTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        patch_size=16,
        frequency_stride=10,
        time_stride=10,
        max_length=48,
        num_mel_bins=32,
        num_labels=5,
    )
    return HF(tf.ASTForAudioClassification(cfg), "input_values"), (torch.randn(1, 48, 32),)
