"""Round-to-nearest block quantization of a weight matrix, packed in the layout of ONNX Runtime's
`com.microsoft.MatMulNBits` (8 or 4 bits per value, one scale and zero point per block along K), and its
inverse. Plain numpy, so the build needs no quantizer package and the packing is testable on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttts_cli.errors import FastTTSError


class QuantizeError(FastTTSError):
    """A component could not be quantized as the preset asks."""


@dataclass(frozen=True)
class PackedWeight:
    blob: np.ndarray  # uint8 (N, k_blocks, block_size * bits / 8)
    scales: np.ndarray  # float32 (N * k_blocks,)
    zero_points: np.ndarray | None  # uint8 (N * ceil(k_blocks * bits / 8),) or None (symmetric)
    k: int
    n: int
    bits: int
    block_size: int


def pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(..., 2m) values 0..15 -> (..., m) bytes, element 2i in the low nibble (the op's layout)."""
    q = q.astype(np.uint8)
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)


def quantize_blocks(w: np.ndarray, bits: int, block_size: int, *, symmetric: bool) -> PackedWeight:
    """Round-to-nearest block quantization of a (K, N) weight, packed for MatMulNBits.

    Blocks run along K (the reduction axis) per output column; K is zero-padded to whole blocks.
    Asymmetric: scale = (max - min) / (2^bits - 1), zero point = round(-min / scale), both per block.
    Symmetric: no zero-point input (the op then uses 2^(bits-1)), scale = absmax / (2^(bits-1) - 1).
    """
    if bits not in (4, 8):
        raise QuantizeError(f"bits must be 4 or 8, got {bits}")
    if block_size < 16 or block_size & (block_size - 1):
        raise QuantizeError(f"block_size must be a power of two >= 16, got {block_size}")
    w = np.asarray(w, dtype=np.float32)
    k, n = w.shape
    kb = -(-k // block_size)
    padded = np.zeros((kb * block_size, n), dtype=np.float32)
    padded[:k] = w
    blocks = padded.T.reshape(n, kb, block_size).astype(np.float64)
    qmax = (1 << bits) - 1
    if symmetric:
        zp = np.full((n, kb), 1 << (bits - 1), dtype=np.float64)
        amax = np.abs(blocks).max(axis=2)
        scale = amax / ((1 << (bits - 1)) - 1)
    else:
        lo = np.minimum(blocks.min(axis=2), 0.0)  # keep 0 exactly representable (zero padding)
        hi = np.maximum(blocks.max(axis=2), 0.0)
        scale = (hi - lo) / qmax
        safe = np.where(scale > 0, scale, 1.0)
        zp = np.clip(np.round(-lo / safe), 0, qmax)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    q = np.clip(np.round(blocks / scale.astype(np.float64)[..., None]) + zp[..., None], 0, qmax)
    blob = q.astype(np.uint8) if bits == 8 else pack_nibbles(q)
    zero_points = None
    if not symmetric:
        zq = zp.astype(np.uint8)
        if bits == 4:
            if kb % 2:
                zq = np.concatenate([zq, np.zeros((n, 1), np.uint8)], axis=1)
            zq = pack_nibbles(zq)
        zero_points = zq.reshape(-1)
    return PackedWeight(blob, scale.reshape(-1), zero_points, k, n, bits, block_size)


def dequantize_blocks(p: PackedWeight) -> np.ndarray:
    """The (K, N) float32 weight MatMulNBits computes with: (q - zero_point) * scale."""
    kb = p.blob.shape[1]
    if p.bits == 8:
        q = p.blob.astype(np.float64)
    else:
        q = np.empty((p.n, kb, p.block_size), dtype=np.float64)
        q[..., 0::2] = p.blob & 0x0F
        q[..., 1::2] = p.blob >> 4
    if p.zero_points is None:
        zp = np.full((p.n, kb), 1 << (p.bits - 1), dtype=np.float64)
    elif p.bits == 8:
        zp = p.zero_points.reshape(p.n, kb).astype(np.float64)
    else:
        packed = p.zero_points.reshape(p.n, -1)
        zp = np.empty((p.n, packed.shape[1] * 2), dtype=np.float64)
        zp[:, 0::2] = packed & 0x0F
        zp[:, 1::2] = packed >> 4
        zp = zp[:, :kb]
    w = (q - zp[..., None]) * p.scales.reshape(p.n, kb)[..., None].astype(np.float64)
    return w.reshape(p.n, kb * p.block_size)[:, : p.k].T.astype(np.float32)
