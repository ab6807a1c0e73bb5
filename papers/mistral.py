"""Mistral 7B (Jiang et al., 2023): Table 1, the architecture (GQA with 8 KV heads, sliding window)."""
from papers import published
from papers.published import grid

PAPER = "mistral"

TABLE_1 = """
row | value
dim | 4096
n_layers | 32
head_dim | 128
hidden_dim | 14336
n_heads | 32
n_kv_heads | 8
window_size | 4096
context_len | 8192
vocab_size | 32000
"""

RECORDS = grid(PAPER, "1", TABLE_1, "", note="Mistral 7B model architecture")
published.register(PAPER, RECORDS)
