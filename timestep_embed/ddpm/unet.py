"""A small UNet for diffusion on MNIST-sized images, and the ResBlock that consumes the time embedding.

``UNet.forward`` computes ``emb = time_embedder(t)`` once, at the top, and hands the same ``emb``
[B, emb_dim] to every [`ResBlock`][timestep_embed.ddpm.unet.ResBlock]; each block owns its small projection of it
(improved-diffusion ``ResBlock.emb_layers``, EDM ``UNetBlock.affine``).

Why the defaults look the way they do (docs/ddpm.md has the measurements): a 2x2
pixel-unshuffle (28x28x1 -> 14x14x4) at the input and a pixel-shuffle at the output, so every
convolution runs at 14x14 or 7x7, which gives 2-3x more images per second than a UNet working at
28x28, with wider channels. Self-attention in the middle block (lowest resolution);
``attention_levels`` adds it after the ResBlocks of other levels.

Every residual branch ends in a zero-initialised layer (ResBlock.conv2, AttentionBlock.proj) and so
does the output conv (``UNet.conv_out``): at initialisation each block is the identity (on its skip
path) and the UNet outputs zeros; see [`zero_init_modules`][timestep_embed.ddpm.unet.zero_init_modules].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from ..folders import load_pretrained, save_pretrained
from ..nn import TimestepEmbedder, build_to_fit
from .schema import ConfigError, check_section, from_dict, to_dict

__all__ = [
    "Injection",
    "UNetConfig",
    "ResBlock",
    "AttentionBlock",
    "UNet",
    "build_time_embedder",
    "zero_init_modules",
    "count_parameters",
    "check_fits",
]

Injection = Literal["add", "scale_shift"]  # h + W emb, or norm(h) * (1 + s) + b
INJECTIONS = get_args(Injection)


@dataclass
class UNetConfig:
    """The UNet's shape (``model`` in a run's config). Working resolution = image_size / unshuffle; each
    further level halves it."""

    KEY: ClassVar[str] = "model"
    RANGES: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("image_size", "in_channels", "unshuffle", "num_res_blocks", "emb_dim", "channels"), "> 0"),
        "dropout": "[0, 1)",
        "augment": "[0, 1]",
        "attention_levels": ">= 0",
    }
    image_size: int = 28  # input height = width
    in_channels: int = 1
    unshuffle: int = 2  # pixel-unshuffle factor at the input (1 = off); 28x28x1 -> 14x14x4
    channels: tuple[int, ...] = (32, 64)  # per level, highest resolution first
    num_res_blocks: int = 1  # per level on the way down (one more on the way up, as ADM)
    attention_levels: tuple[int, ...] = ()  # levels whose ResBlocks get self-attention (0 = highest res)
    emb_dim: int = 256  # what every ResBlock receives from the time embedder
    injection: Injection = "scale_shift"
    dropout: float = 0.0
    augment: float = 0.0  # share of training images given a random shift of up to 2 pixels, told to the UNet (0: off)
    time_embedding: dict[str, Any] = field(default_factory=dict)  # keyword arguments of nn.TimestepEmbedder

    def __post_init__(self) -> None:
        check_section(self)
        if not self.channels:
            raise ConfigError("model.channels = []: expected a non-empty list of positive ints, one per level")
        bad_levels = [lv for lv in self.attention_levels if lv >= len(self.channels)]
        if bad_levels:
            raise ConfigError(
                f"model.attention_levels = {list(self.attention_levels)}: levels are 0..{len(self.channels) - 1}"
            )
        if self.image_size % self.unshuffle:
            raise ConfigError(f"model.unshuffle = {self.unshuffle}: must divide model.image_size = {self.image_size}")
        size, factor = self.image_size // self.unshuffle, 2 ** (len(self.channels) - 1)
        if size % factor:
            raise ConfigError(
                f"model.channels = {list(self.channels)}: {len(self.channels)} levels halve the working resolution "
                f"{size}x{size} {len(self.channels) - 1} times, which needs it divisible by {factor}; use fewer "
                "levels or another unshuffle"
            )
        attended = sorted({self.channels[-1], *(self.channels[lv] for lv in self.attention_levels)})  # mid: last
        odd = next((c for c in attended if c % attention_heads(c)), None)
        if odd is not None:
            raise ConfigError(
                f"model.channels = {list(self.channels)}: self-attention splits {odd} channels into "
                f"{attention_heads(odd)} heads (channels // 32), which must divide them; use a multiple of 32 there, "
                "or fewer than 64 channels"
            )


def attention_heads(channels: int, head_dim: int = 32) -> int:
    """The heads an `AttentionBlock` of ``channels`` splits into: ``channels // head_dim``, at least 1."""
    return max(1, channels // head_dim)


def _groups(channels: int) -> int:
    """GroupNorm groups: 32 when possible (the ADM / diffusers default), else the largest divisor of
    ``channels`` up to channels // 2. At least 2 channels per group: with one, the norm after the
    additive injection would subtract the per-channel embedding offset right away."""
    return next(g for g in range(max(1, min(32, channels // 2)), 0, -1) if channels % g == 0)


class ResBlock(nn.Module):
    """GroupNorm-SiLU-conv, time embedding injected, GroupNorm-SiLU-dropout-conv(zero init), plus skip.

    ``injection="add"``: h = h + Linear(SiLU(emb)) after the first conv (DDPM / diffusers default);
    ``injection="scale_shift"``: h = norm2(h) * (1 + scale) + shift (improved-diffusion's
    ``use_scale_shift_norm``, diffusers' ``resnet_time_scale_shift="scale_shift"``).

    forward(x [B, in_ch, H, W], emb [B, emb_dim]) -> [B, out_ch, H, W]
    """

    def __init__(self, in_ch: int, out_ch: int, emb_dim: int, injection: str = "add", dropout: float = 0.0):
        super().__init__()
        if injection not in INJECTIONS:
            raise ValueError(f"injection={injection!r} is not one of {INJECTIONS}")
        for name, value in (("in_ch", in_ch), ("out_ch", out_ch), ("emb_dim", emb_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: expected a positive int")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout={dropout!r}: expected a float in [0, 1)")
        self.injection = injection
        self.norm1 = nn.GroupNorm(_groups(in_ch), in_ch)
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.emb_proj = nn.Linear(emb_dim, out_ch * (2 if injection == "scale_shift" else 1))
        self.norm2 = nn.GroupNorm(_groups(out_ch), out_ch)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1)  # the end of the residual branch: zero init
        self.skip = nn.Identity() if in_ch == out_ch else nn.Conv2d(in_ch, out_ch, 1)
        zero_init_modules(self.conv2)

    def residual(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """The residual branch alone, [B, out_ch, H, W] (zero at initialisation)."""
        h = self.conv1(F.silu(self.norm1(x)))
        e = self.emb_proj(F.silu(emb))[:, :, None, None].to(h.dtype)
        if self.injection == "scale_shift":
            scale, shift = e.chunk(2, dim=1)
            h = self.norm2(h) * (1 + scale) + shift
        else:
            h = self.norm2(h + e)
        return self.conv2(self.dropout(F.silu(h)))

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        return self.skip(x) + self.residual(x, emb)


class AttentionBlock(nn.Module):
    """Multi-head self-attention over the H*W positions, residual, output projection zero-initialised.

    forward(x [B, C, H, W]) -> [B, C, H, W]
    """

    def __init__(self, channels: int, head_dim: int = 32):
        super().__init__()
        self.heads = attention_heads(channels, head_dim)
        self.norm = nn.GroupNorm(_groups(channels), channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.proj = nn.Conv2d(channels, channels, 1)
        zero_init_modules(self.proj)

    def residual(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape  # noqa: N806
        q, k, v = self.qkv(self.norm(x)).reshape(B, 3, self.heads, C // self.heads, H * W).unbind(1)
        h = F.scaled_dot_product_attention(q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2))
        return self.proj(h.transpose(-1, -2).reshape(B, C, H, W))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.residual(x)


def zero_init_modules(*modules: nn.Module) -> None:
    """Set every parameter of ``modules`` to zero: the one place the UNet zero-initialises."""
    for module in modules:
        for p in module.parameters():
            nn.init.zeros_(p)


def build_time_embedder(config: UNetConfig) -> nn.Module:
    """The default time path: [`TimestepEmbedder`][timestep_embed.TimestepEmbedder] (time input, sinusoid,
    MLP) with output width ``config.emb_dim`` and the options in ``config.time_embedding``
    (e.g. ``{"convention": "ddpm", "sinusoid_dim": 128}``)."""
    options = dict(config.time_embedding)
    try:
        return TimestepEmbedder(config.emb_dim, **options)
    except TypeError as exc:
        raise ValueError(f"model.time_embedding = {options!r}: not accepted by TimestepEmbedder ({exc})") from exc
    except ValueError as exc:
        raise ValueError(f"model.time_embedding = {options!r}: {exc}") from exc


def check_fits(images: torch.Tensor, config: UNetConfig) -> None:
    """ConfigError unless the UNet of ``config`` takes ``images`` ``[N, C, H, W]``: its ``in_channels`` and
    ``image_size`` are the images' (a run checks this before it writes anything)."""
    c, h, w = images.shape[1:]
    if (config.in_channels, config.image_size, config.image_size) != (c, h, w):
        raise ConfigError(
            f"model.in_channels = {config.in_channels} and model.image_size = {config.image_size}, but the data's "
            f"images are {c}x{h}x{w} (MNIST: 1x28x28, 1x32x32 with data.pad_to_32 = true): set the model to the data"
        )


class UNet(nn.Module):
    """UNet(config, time_embedder=None): forward(x [B, C, H, W], t [B], shift=None) -> [B, C, H, W].

    ``shift`` [B, 2]: how far each training image was moved (``config.augment``,
    [`random_shifts`][timestep_embed.ddpm.data.random_shifts]), joined to the time embedding; None (sampling) is no
    shift.

    ``time_embedder``: any module mapping ``t`` [B] (what diffusion.py passes: int64 indices, or
    float 1000 * t) to [B, config.emb_dim]; None builds the default
    ([`build_time_embedder`][timestep_embed.ddpm.unet.build_time_embedder]).
    """

    def __init__(self, config: UNetConfig | None = None, time_embedder: nn.Module | None = None):
        super().__init__()
        self.config = config = config if config is not None else UNetConfig()
        if time_embedder is not None and not isinstance(time_embedder, nn.Module):
            what = type(time_embedder).__name__
            raise TypeError(f"time_embedder must be an nn.Module t [B] -> [B, emb_dim], got {what}")
        self.custom_time_embedder = time_embedder is not None
        self.time_embedder = time_embedder if time_embedder is not None else build_time_embedder(config)
        ch, emb, r = config.channels, config.emb_dim, config.unshuffle

        def block(i: int, o: int) -> ResBlock:
            return ResBlock(i, o, emb, config.injection, config.dropout)

        self.conv_in = nn.Conv2d(config.in_channels * r * r, ch[0], 3, padding=1)
        # Down path: skip widths are recorded in the order the skips are pushed in forward().
        self.down, skips, cur = nn.ModuleList(), [ch[0]], ch[0]
        for level, width in enumerate(ch):
            for _ in range(config.num_res_blocks):
                self.down.append(self._stage(block(cur, width), width, level in config.attention_levels))
                cur = width
                skips.append(cur)
            if level < len(ch) - 1:
                self.down.append(nn.Conv2d(cur, cur, 3, stride=2, padding=1))  # halve H, W
                skips.append(cur)
        # Middle: ResBlock, self-attention, ResBlock at the lowest resolution (always, as ADM / diffusers).
        self.mid = nn.ModuleList([block(cur, cur), AttentionBlock(cur), block(cur, cur)])
        # Up path: num_res_blocks + 1 blocks per level, each eating one skip.
        self.up = nn.ModuleList()
        for level in reversed(range(len(ch))):
            for _ in range(config.num_res_blocks + 1):
                self.up.append(
                    self._stage(block(cur + skips.pop(), ch[level]), ch[level], level in config.attention_levels)
                )
                cur = ch[level]
            if level > 0:
                # conv at the low resolution, then nearest x2: 4x cheaper than conv after upsampling
                self.up.append(
                    nn.Sequential(nn.Conv2d(cur, cur, 3, padding=1), nn.Upsample(scale_factor=2, mode="nearest"))
                )
        # model.augment: the training image's shift (dy, dx), added to the time embedding; zero at init, as EDM's
        # DhariwalUNet starts its map_augment, so that a shift does not drown the time signal before it is learnt
        self.shift_embed = nn.Linear(2, emb, bias=False) if config.augment > 0 else None
        if self.shift_embed is not None:
            zero_init_modules(self.shift_embed)
        self.norm_out = nn.GroupNorm(_groups(cur), cur)
        self.conv_out = nn.Conv2d(cur, config.in_channels * r * r, 3, padding=1)
        zero_init_modules(self.conv_out)

    @staticmethod
    def _stage(res: ResBlock, width: int, attention: bool) -> nn.ModuleList:
        return nn.ModuleList([res, AttentionBlock(width) if attention else nn.Identity()])

    def forward(self, x: torch.Tensor, t: torch.Tensor, shift: torch.Tensor | None = None) -> torch.Tensor:
        cfg = self.config
        if (
            x.ndim != 4
            or x.shape[1] != cfg.in_channels
            or x.shape[-1] != cfg.image_size
            or x.shape[-2] != cfg.image_size
        ):
            raise ValueError(
                f"x has shape {tuple(x.shape)}; this UNet expects "
                f"[B, {cfg.in_channels}, {cfg.image_size}, {cfg.image_size}]"
            )
        t = torch.as_tensor(t, device=x.device)
        if t.ndim == 0:
            t = t.expand(x.shape[0])
        emb = self.time_embedder(t)  # ONCE, shared by every block below
        if emb.shape != (x.shape[0], cfg.emb_dim):
            raise ValueError(
                f"time_embedder returned {tuple(emb.shape)}, expected [B, emb_dim] = [{x.shape[0]}, {cfg.emb_dim}]"
            )
        if shift is not None:  # training with model.augment; None (sampling) is an unmoved image, shift 0
            if self.shift_embed is None or shift.shape != (x.shape[0], 2):
                what = "a shift [B, 2]" if self.shift_embed is not None else "no shift (model.augment = 0)"
                raise ValueError(f"shift has shape {tuple(shift.shape)}; this UNet takes {what}")
            emb = emb + self.shift_embed(shift.to(emb.dtype))
        h = self.conv_in(F.pixel_unshuffle(x, cfg.unshuffle) if cfg.unshuffle > 1 else x)
        hs = [h]
        for layer in self.down:
            h = layer[1](layer[0](h, emb)) if isinstance(layer, nn.ModuleList) else layer(h)
            hs.append(h)
        h = self.mid[2](self.mid[1](self.mid[0](h, emb)), emb)
        for layer in self.up:
            if isinstance(layer, nn.ModuleList):
                h = layer[1](layer[0](torch.cat([h, hs.pop()], dim=1), emb))
            else:
                h = layer(h)
        h = self.conv_out(F.silu(self.norm_out(h)))
        return F.pixel_shuffle(h, cfg.unshuffle) if cfg.unshuffle > 1 else h

    def save_pretrained(self, folder, run_config=None) -> Path:
        """``folder/config.json`` (this UNet's config fields, flat, plus ``"run"``: the whole run's config
        or null, ``_class_name`` and the versions) and ``folder/model.safetensors`` (the weights as they
        are: call it on the EMA model to export those). Only UNets with the default time embedder built
        from their config can be rebuilt from it."""
        if self.custom_time_embedder:
            raise ValueError("save_pretrained needs the default time embedder (a custom one is not in the config)")
        run = to_dict(run_config) if run_config is not None else None
        return save_pretrained(folder, "UNet", {**to_dict(self.config), "run": run}, self.state_dict())

    @classmethod
    def from_pretrained(
        cls, folder, *, subfolder: str | None = None, torch_dtype: torch.dtype | None = None, device=None
    ) -> UNet:
        """The UNet `save_pretrained` wrote (or a folder of earlier versions), weights loaded
        strictly, in eval mode, cast to ``torch_dtype`` and moved to ``device`` when given."""
        if torch_dtype is not None and not (isinstance(torch_dtype, torch.dtype) and torch_dtype.is_floating_point):
            raise ValueError(f"torch_dtype must be a floating torch dtype, got {torch_dtype!r}")
        config, state = load_pretrained(folder, "UNet", subfolder=subfolder)
        fields = {k: v for k, v in config.items() if k != "run" and not k.startswith("_")}
        model_config = from_dict(UNetConfig, fields, "model")
        model = build_to_fit(lambda: cls(model_config), state, str(folder))
        return model.to(device=device, dtype=torch_dtype).eval()

    def residual_blocks(self) -> list[nn.Module]:
        """Every ResBlock and AttentionBlock (for tests: each one's residual branch is zero at init)."""
        return [m for m in self.modules() if isinstance(m, (ResBlock, AttentionBlock))]


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
