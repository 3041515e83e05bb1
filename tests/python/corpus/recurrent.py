"""Recurrent nets from ``torch.nn``: LSTM and GRU, bidirectional and multi-layer, with an
embedding or a linear input projection and a classifier head."""

from __future__ import annotations

import torch

from .registry import Built, case


class Recurrent(torch.nn.Module):
    def __init__(self, cell: type, bidirectional: bool, layers: int, embed: bool) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16) if embed else torch.nn.Linear(8, 16)
        self.rnn = cell(16, 24, num_layers=layers, batch_first=True, bidirectional=bidirectional)
        self.head = torch.nn.Linear(24 * (2 if bidirectional else 1), 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(self.embed(x))
        return self.head(y)


@case("rnn")
def lstm_bidir_2l() -> Built:
    return Recurrent(torch.nn.LSTM, True, 2, embed=False), (torch.randn(1, 10, 8),)


@case("rnn", fast=True)
def lstm_text() -> Built:
    return Recurrent(torch.nn.LSTM, False, 1, embed=True), (torch.randint(0, 50, (1, 10)),)


@case("rnn")
def gru_bidir_2l() -> Built:
    return Recurrent(torch.nn.GRU, True, 2, embed=False), (torch.randn(1, 10, 8),)


@case("rnn")
def gru_3l() -> Built:
    return Recurrent(torch.nn.GRU, False, 3, embed=True), (torch.randint(0, 50, (1, 10)),)
