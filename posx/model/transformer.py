"""A small decoder-only pre-norm Transformer language model.

The model receives its positional encoding as an object and positions as a tensor; it never
reads config and never asks which encoding it holds.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posx.encodings.base import PositionalEncoding, table_init_std
from posx.kernels.memo import forward_scope
from posx.model.attention import causal_attention
from posx.model.rules import check_kernel, head_dim


class SelfAttention(nn.Module):
    """Causal multi-head self-attention; the layer's encoding, passed to each call, applies
    its hooks (see :func:`posx.model.attention.causal_attention`).

    Args:
        d_model: Residual width.
        n_heads: Attention heads (must divide ``d_model``).
        dropout: Dropout on the output projection.
        block_size: Most queries per block on the blocked bias path.
        kernel: Kernel for bias encodings: ``auto``, ``blocked`` or ``flex``.
    """

    def __init__(
        self, d_model: int, n_heads: int, dropout: float, block_size: int, kernel: str = "auto"
    ) -> None:
        super().__init__()
        self.n_heads, self.block_size, self.kernel = n_heads, block_size, kernel
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, pos: Tensor, encoding: PositionalEncoding) -> Tensor:
        """``x [b, s, d]``, ``pos [s]`` or ``[b, s]`` -> ``[b, s, d]``."""
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        # [b, h, s, d_h]
        if torch.compiler.is_compiling():
            # Encodings and kernels may break the graph (memo lookups read positions in
            # Python); views of one tensor as outputs of the graph before the break made
            # AOTAutograd replay them with garbage sizes (torch 2.13, CPU). Own tensors do not.
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = causal_attention(q, k, v, pos, pos, encoding, self.block_size, self.kernel)
        return self.drop(self.proj(out.transpose(1, 2).reshape(b, s, d)))


class Block(nn.Module):
    """One pre-norm Transformer block: self-attention, then a GELU MLP, each a residual branch.

    Args:
        d_model: Residual width.
        n_heads: Attention heads (must divide ``d_model``).
        d_ff: MLP hidden width.
        dropout: Dropout on the residual branches.
        block_size: Most queries per block on the blocked bias path.
        kernel: Kernel for bias encodings: ``auto``, ``blocked`` or ``flex``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        block_size: int,
        kernel: str = "auto",
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_heads, dropout, block_size, kernel)
        self.norm2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, d_ff, bias=False)
        self.out = nn.Linear(d_ff, d_model, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, pos: Tensor, encoding: PositionalEncoding) -> Tensor:
        x = x + self.attn(self.norm1(x), pos, encoding)
        return x + self.drop(self.out(F.gelu(self.fc(self.norm2(x)))))


class TransformerLM(nn.Module):
    """Token embedding, ``n_layers`` pre-norm blocks, final norm, LM head.

    Args:
        vocab_size: Number of token ids.
        encoding: Positional encoding; layer ``i`` uses ``encoding.for_layer(i)``.
        d_model: Residual width.
        n_layers: Number of blocks.
        n_heads: Attention heads (must divide ``d_model``).
        d_ff: MLP hidden width.
        dropout: Dropout on residual branches and embeddings.
        tie_embeddings: Share the token embedding with the output head.
        embed_init_std: Standard deviation of the token embedding's normal initialisation;
            ``None``: 0.02 (GPT-2's, as every other weight). 1.0 is PyTorch's ``nn.Embedding``
            default, which a learned position table started at 1.0 needs beside it (the two
            scales' ratio decides what the first layer reads: docs/reproductions.md).
        attn_block_size: Query block size on the biased attention path.
        attention_kernel: Kernel for bias encodings: ``auto`` (FlexAttention on CUDA, blocked
            elsewhere), ``blocked`` or ``flex`` (see :mod:`posx.model.attention`); ``flex`` also
            takes the FlexAttention route of an encoding that computes attention itself.
    """

    def __init__(
        self,
        vocab_size: int,
        encoding: PositionalEncoding,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        d_ff: int = 256,
        dropout: float = 0.0,
        tie_embeddings: bool = True,
        embed_init_std: float | None = None,
        attn_block_size: int = 256,
        attention_kernel: str = "auto",
    ) -> None:
        super().__init__()
        head_dim(d_model, n_heads)
        self.d_model = d_model
        self.tok = nn.Embedding(vocab_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, d_ff, dropout, attn_block_size) for _ in range(n_layers)
        )
        self.attention_kernel = attention_kernel
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.head.weight = self.tok.weight
        # Initialise the model's own weights only: encodings own their parameters' init.
        for module in (self.tok, self.blocks, self.norm, self.head):
            module.apply(self._init)
        if (
            embed_init_std is not None
        ):  # drawn again only then: the default's draws stay as they were
            std = table_init_std(embed_init_std, "model", "embed_init_std")
            nn.init.normal_(self.tok.weight, std=std)
        for block in self.blocks:  # GPT-2: shrink residual projections with depth
            for proj in (block.attn.proj, block.out):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * n_layers))
        self.encoding = encoding

    @property
    def attention_kernel(self) -> str:
        """Which kernel bias encodings take (:data:`posx.model.attention.KERNELS`); settable,
        e.g. to evaluate a model trained with FlexAttention through the blocked kernel."""
        return self.blocks[0].attn.kernel if len(self.blocks) else "auto"

    @attention_kernel.setter
    def attention_kernel(self, kernel: str) -> None:
        check_kernel(kernel)
        for block in self.blocks:
            block.attn.kernel = kernel

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, tokens: Tensor, pos: Tensor | None = None) -> Tensor:
        """Next-token logits.

        Args:
            tokens: Token ids ``[b, s]``.
            pos: Positions ``[s]`` or ``[b, s]``; ``arange(s)`` when omitted.

        Returns:
            Logits ``[b, s, vocab]``.
        """
        if pos is None:
            pos = torch.arange(tokens.shape[1], device=tokens.device)
        # Position-derived tensors with autograd history are shared by this forward's layers.
        with forward_scope():
            x = self.drop(self.encoding.embed(self.tok(tokens), pos))
            for i, block in enumerate(self.blocks):
                x = block(x, pos, self.encoding.for_layer(i))
        return self.head(self.norm(x))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
