"""Text cases: encoders (absolute, relative-bucket, disentangled and rotary positions) and
encoder-decoders (the encoder alone, and one decoder step of the whole model)."""

from __future__ import annotations

import torch
import transformers as tf

from .registry import HF, Built, case, tokens

ENC = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
)
IDS = "input_ids"


@case("text")
def bert() -> Built:
    return HF(tf.BertModel(tf.BertConfig(**ENC)), IDS), tokens()


@case("text")
def roberta() -> Built:
    return HF(tf.RobertaForMaskedLM(tf.RobertaConfig(**ENC)), IDS), tokens()


@case("text")
def distilbert() -> Built:
    cfg = tf.DistilBertConfig(
        vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64
    )
    return HF(tf.DistilBertModel(cfg), IDS), tokens()


@case("text")
def albert() -> Built:
    cfg = tf.AlbertConfig(**ENC, embedding_size=16)
    return HF(tf.AlbertModel(cfg), IDS), tokens()


@case("text")
def electra() -> Built:
    cfg = tf.ElectraConfig(**ENC, embedding_size=16)
    return HF(tf.ElectraForSequenceClassification(cfg), IDS), tokens()


@case("text")
def deberta() -> Built:
    cfg = tf.DebertaConfig(**ENC, relative_attention=True, pos_att_type=["c2p", "p2c"])
    return HF(tf.DebertaModel(cfg), IDS), tokens()


@case("text")
def deberta_v2() -> Built:
    cfg = tf.DebertaV2Config(
        **ENC,
        relative_attention=True,
        pos_att_type=["c2p", "p2c"],
        position_buckets=8,
        max_relative_positions=16,
    )
    return HF(tf.DebertaV2Model(cfg), IDS), tokens()


@case("text")
def roformer() -> Built:
    cfg = tf.RoFormerConfig(**ENC, embedding_size=32)
    return HF(tf.RoFormerModel(cfg), IDS), tokens()


@case("text", fast=True)
def mpnet() -> Built:
    return HF(tf.MPNetModel(tf.MPNetConfig(**ENC)), IDS), tokens()


@case("text")
def squeezebert() -> Built:
    cfg = tf.SqueezeBertConfig(
        **ENC,
        embedding_size=32,
        q_groups=2,
        k_groups=2,
        v_groups=2,
        post_attention_groups=2,
        intermediate_groups=2,
        output_groups=2,
    )
    return HF(tf.SqueezeBertModel(cfg), IDS), tokens()


@case("text")
def convbert() -> Built:
    cfg = tf.ConvBertConfig(**ENC, embedding_size=32, head_ratio=2, conv_kernel_size=3)
    return HF(tf.ConvBertModel(cfg), IDS), tokens()


@case("text")
def mobilebert() -> Built:
    cfg = tf.MobileBertConfig(
        **{**ENC, "hidden_size": 64},
        embedding_size=16,
        intra_bottleneck_size=16,
        true_hidden_size=16,
        num_feedforward_networks=2,
    )
    return HF(tf.MobileBertModel(cfg), IDS), tokens()


@case("text")
def funnel() -> Built:
    cfg = tf.FunnelConfig(
        vocab_size=99,
        d_model=32,
        n_head=4,
        d_head=8,
        d_inner=64,
        block_sizes=[1, 1],
        num_decoder_layers=1,
    )
    return HF(tf.FunnelModel(cfg), IDS), tokens(16)


# -- encoder-decoders ---------------------------------------------------------------------------
T5 = dict(
    vocab_size=99,
    d_model=32,
    d_kv=8,
    d_ff=64,
    num_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=16,
)
BART = dict(
    vocab_size=99,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
)


def _step() -> dict[str, torch.Tensor]:
    """One decoder step: the start token then two generated tokens."""
    return {"decoder_input_ids": torch.tensor([[0, 17, 42]])}


@case("seq2seq")
def t5_encoder() -> Built:
    return HF(tf.T5EncoderModel(tf.T5Config(**T5)), IDS), tokens()


@case("seq2seq")
def t5_step() -> Built:
    m = tf.T5ForConditionalGeneration(tf.T5Config(**T5, feed_forward_proj="gated-gelu"))
    return HF(m, IDS, key="logits", consts=_step(), use_cache=False), tokens()


@case("seq2seq")
def bart_encoder() -> Built:
    return HF(tf.BartModel(tf.BartConfig(**BART)).get_encoder(), IDS), tokens()


@case("seq2seq")
def bart_step() -> Built:
    m = tf.BartForConditionalGeneration(tf.BartConfig(**BART))
    return HF(m, IDS, key="logits", consts=_step(), use_cache=False), tokens()


@case("seq2seq")
def marian_step() -> Built:
    m = tf.MarianMTModel(tf.MarianConfig(**BART, pad_token_id=0, decoder_start_token_id=0))
    return HF(m, IDS, key="logits", consts=_step(), use_cache=False), tokens()


@case("seq2seq")
def pegasus_step() -> Built:
    m = tf.PegasusForConditionalGeneration(tf.PegasusConfig(**BART))
    return HF(m, IDS, key="logits", consts=_step(), use_cache=False), tokens()
