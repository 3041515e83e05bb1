"""Decoder-only language models without a cache (``use_cache=False``, logits out): learned,
rotary, partial-rotary, ALiBi positions; MHA, GQA, parallel attention / MLP blocks."""

from __future__ import annotations

import transformers as tf

from .registry import HF, Built, case, tokens

LM = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
)
GQA = dict(LM, num_key_value_heads=2)


def _lm(model_cls: type, cfg: object) -> Built:
    return HF(model_cls(cfg), "input_ids", key="logits", use_cache=False), tokens()


@case("lm")
def gpt2() -> Built:
    cfg = tf.GPT2Config(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    return _lm(tf.GPT2LMHeadModel, cfg)


@case("lm")
def llama() -> Built:
    return _lm(tf.LlamaForCausalLM, tf.LlamaConfig(**GQA))


@case("lm")
def mistral() -> Built:
    return _lm(tf.MistralForCausalLM, tf.MistralConfig(**GQA, sliding_window=8))


@case("lm")
def qwen2() -> Built:
    return _lm(tf.Qwen2ForCausalLM, tf.Qwen2Config(**GQA))


@case("lm")
def qwen3() -> Built:
    return _lm(tf.Qwen3ForCausalLM, tf.Qwen3Config(**GQA, head_dim=8))


@case("lm")
def gemma() -> Built:
    return _lm(tf.GemmaForCausalLM, tf.GemmaConfig(**GQA, head_dim=8))


@case("lm")
def phi() -> Built:
    return _lm(tf.PhiForCausalLM, tf.PhiConfig(**LM, partial_rotary_factor=0.5))


@case("lm")
def phi3() -> Built:
    return _lm(tf.Phi3ForCausalLM, tf.Phi3Config(**GQA, pad_token_id=0))


@case("lm", fast=True)
def gpt_neox() -> Built:
    return _lm(tf.GPTNeoXForCausalLM, tf.GPTNeoXConfig(**LM, rotary_pct=0.5))


@case("lm")
def opt() -> Built:
    cfg = tf.OPTConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        ffn_dim=64,
        num_attention_heads=4,
        max_position_embeddings=64,
        word_embed_proj_dim=32,
    )
    return _lm(tf.OPTForCausalLM, cfg)


@case("lm")
def falcon() -> Built:
    cfg = tf.FalconConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        new_decoder_architecture=False,
        multi_query=True,
        parallel_attn=True,
    )
    return _lm(tf.FalconForCausalLM, cfg)


@case("lm")
def bloom() -> Built:
    cfg = tf.BloomConfig(vocab_size=99, hidden_size=32, n_layer=2, n_head=4)
    return _lm(tf.BloomForCausalLM, cfg)


@case("lm")
def gptj() -> Built:
    cfg = tf.GPTJConfig(vocab_size=99, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64)
    return _lm(tf.GPTJForCausalLM, cfg)


@case("lm")
def stablelm() -> Built:
    return _lm(tf.StableLmForCausalLM, tf.StableLmConfig(**GQA, partial_rotary_factor=0.25))


@case("lm")
def starcoder2() -> Built:
    return _lm(tf.Starcoder2ForCausalLM, tf.Starcoder2Config(**GQA))


@case("lm")
def olmo() -> Built:
    return _lm(tf.OlmoForCausalLM, tf.OlmoConfig(**GQA))
