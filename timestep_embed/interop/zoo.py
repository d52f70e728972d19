"""The port-bug zoo: the bugs porters report, planted into every family they apply to, each checked
with [`verify_port`][timestep_embed.interop.verify_port] on random weights and random timesteps.

Every `ZooBug` cites the public threads that report it. `run_zoo` applies each bug to
each of its families and records whether [`verify_port`][timestep_embed.interop.verify_port] detects it, at which stage,
and the cause it names; `false_alarms` checks that correct pairs (a copy; the same weights with a
float64 sinusoid, whose float32 rounding differs; a whole diffusers model against the standalone
embedder read from its checkpoint) raise nothing. ``python scripts/port_bug_zoo.py`` prints the table.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..nn import InModelDtype, SinusoidalEmbedding, TimestepEmbedder
from .verify import PortVerdict, verify_port
from .zoo_bugs import (
    MODULATIONS,
    Case,
    HalfPhaseSinusoid,
    activation_first,
    bf16,
    c_noise_for_sigma,
    embedder_case,
    fed,
    flow,
    fourier_width,
    grid_case,
    guidance_dropped,
    model_case,
    no_silu_before,
    other_shift,
    per_token,
    respaced,
    sigma_for_t,
    sinusoid_of,
    swap_chunks,
    with_sinusoid,
    without_post_act,
)
from .zoo_ports import (
    TINY_MODELS,
    ZOO_FAMILIES,
    FlowSchedule,
    family_embedder,
    family_model,
    family_timesteps,
)

__all__ = ["ZooBug", "ZooResult", "ZOO", "run_zoo", "false_alarms", "zoo_table"]


@dataclass(frozen=True)
class ZooBug:
    """One bug class: what it is, where it was reported, where [`verify_port`][timestep_embed.interop.verify_port]
    should part (``stage``) and how its cause begins (``cause``), the families it applies to and how a case is
    planted."""

    name: str
    title: str
    sources: tuple[str, ...]
    stage: str
    cause: str
    families: tuple[str, ...]
    plant: Callable[[str, int], Case]
    note: str = ""


@dataclass
class ZooResult:
    bug: str
    family: str
    detected: bool
    stage: str
    cause: str
    expected: bool
    seconds: float


ALL = tuple(ZOO_FAMILIES)
STEPS = tuple(f for f in ALL if ZOO_FAMILIES[f][2] == "steps")
FLOW = tuple(f for f in ALL if ZOO_FAMILIES[f][2] in ("flow", "sigma"))
SINUSOID = tuple(f for f in ALL if f not in ("edm_ve", "k_diffusion_v1"))  # the others have Fourier features
THOUSAND = STEPS + ("sd3", "wan21", "hunyuan_video", "edm_vp")  # a sinusoid built for 0..1000
FRACTIONAL = FLOW + ("edm_vp", "k_diffusion_compvis")
GRID = ("dit", "dit_diffusers", "pixart", "sd3")  # a 2-D sincos table of the patches
GUIDANCE = ("flux_dev", "hunyuan_video")
POST_ACT = ("edm", "edm_vp", "edm_ve", "k_diffusion_v1")


ZOO = [
    ZooBug("scaled_twice", "sigma * 1000 fed to a model that multiplies by 1000 itself",
           ("modelscope/DiffSynth-Studio#1503",), "sinusoid input", "scaled by 1000 twice",
           ("flux_dev", "flux_schnell"), lambda f, s: fed(f, s, lambda t: t * 1000)),
    ZooBug("unit_t", "t in [0, 1] fed to a sinusoid built for 0..1000 (REPA's 'unintended' input)",
           ("sihyun-yu/REPA#40", "willisma/SiT#24", "mflux-community/mflux#273"), "sinusoid input",
           "t in [0, 1] where t * 1000 is expected", THOUSAND, lambda f, s: fed(f, s, lambda t: t.double() / 1000)),
    ZooBug("bf16_timestep", "bfloat16 rounding of the timestep (or of 1000 sigma): neighbouring steps collide",
           ("huggingface/diffusers#9405", "modelscope/DiffSynth-Studio#562", "kohya-ss/musubi-tuner#729"),
           "sinusoid input", "rounded to bfloat16: the candidate", ALL, lambda f, s: fed(f, s, bf16)),
    ZooBug("bf16_engines", "one engine rounds the timestep to bfloat16, the other keeps float32",
           ("utensils/mold#786",), "sinusoid input", "rounded to bfloat16: the reference", ALL,
           lambda f, s: {**fed(f, s, lambda t: t), "timesteps": bf16(family_timesteps(f, s)),
                         "candidate_timesteps": family_timesteps(f, s)}),
    ZooBug("int_truncation", "fractional timesteps truncated to integers (an int64 cast)",
           ("huggingface/diffusers#14718", "NVlabs/DiffusionNFT#42"), "sinusoid input",
           "fractional steps truncated to integers", FRACTIONAL,
           lambda f, s: fed(f, s, lambda t: t.trunc())),
    ZooBug("reversed_time", "time reversed: t = 0 is noise on one side and data on the other",
           ("huggingface/diffusers#9769", "Tencent-Hunyuan/Hunyuan3D-2#124"), "sinusoid input", "reversed time",
           FLOW, lambda f, s: fed(f, s, lambda t: flow(t) - t)),
    ZooBug("sigma_for_t", "sigma fed where the fractional step index t = sigma_to_t(sigma) is expected",
           ("mcmonkeyprojects/sd-dynamic-thresholding#87",), "sinusoid input", "a map skipped",
           ("k_diffusion_compvis",), sigma_for_t),
    ZooBug("sigma_for_c_noise", "sigma fed where EDM's c_noise = ln(sigma) / 4 is expected",
           ("huggingface/diffusers#3492",), "sinusoid input", "sigma where ln(sigma) / 4 is expected",
           ("edm",), lambda f, s: fed(f, s, lambda c: (4 * c.double()).exp())),
    ZooBug("c_noise_for_sigma", "c_noise = ln(sigma) / 4 fed to a model that takes sigma (and logs it itself)",
           ("huggingface/diffusers#3492",), "sinusoid input", "ln(sigma) / 4 where sigma is expected",
           ("k_diffusion_v1",), c_noise_for_sigma),
    ZooBug("respaced_index", "the index into a respaced schedule fed where the original step is expected",
           ("jsu27/decomp_diffusion#2", "openai/improved-diffusion#44"), "sinusoid input", "respaced index",
           STEPS, respaced),
    ZooBug("shift_twice", "the flow-matching shift applied twice to the sigmas",
           ("huggingface/diffusers#13243", "huggingface/diffusers#13706"), "sinusoid input", "shift applied twice",
           FLOW, lambda f, s: fed(f, s, lambda t: FlowSchedule()(t.double() / flow(t)) * flow(t))),
    ZooBug("per_token_scalar", "per-token timesteps [B, tokens] treated as one scalar per sample",
           ("NVIDIA/TensorRT-Model-Connect#190",), "sinusoid input", "per-token timesteps collapsed",
           ("wan21",), per_token),
    ZooBug("guidance_dropped", "the guidance embedder dropped (guidance_embeds=False, its weights not loaded)",
           ("sgl-project/sglang#22059", "vllm-project/vllm-omni#2433"), "sinusoid input", "guidance path dropped",
           GUIDANCE, guidance_dropped,
           note="only a whole model shows it: a standalone time embedder has no guidance path to drop"),
    ZooBug("guidance_twice", "the guidance scaled by 1000 twice (pipeline and model)",
           ("sgl-project/sglang#22059",), "sinusoid input", "guidance scaled by 1000 twice", GUIDANCE,
           lambda f, s: model_case(f, s, lambda m: m, lambda i: {**i, "guidance": i["guidance"] * 1000})),
    ZooBug("width_hardcoded", "the sinusoid's or Fourier features' width hard-coded (16)",
           ("huggingface/diffusers#12110", "huggingface/diffusers#3380"), "sinusoid", "width", ALL,
           lambda f, s: embedder_case(f, s, fourier_width)),
    ZooBug("xy_swapped", "x and y swapped in the 2-D position table of the patches",
           ("facebookresearch/mae#18", "huggingface/diffusers#10877", "huggingface/diffusers#11309"),
           "sinusoid", "x and y swapped", GRID, lambda f, s: grid_case(f, s, True),
           note="not the time path: checked on the position table (verify_port with stage callables, fed the grid's "
                "coordinates); all-ones inputs or a square grid's diagonal give x == y and hide it"),
    ZooBug("halves_swapped", "[sin | cos] halves swapped by a wrong flip_sin_to_cos",
           ("flashinfer-ai/flashinfer#3819", "huggingface/diffusers#1369"), "sinusoid", "sin and cos halves swapped",
           SINUSOID, lambda f, s: embedder_case(f, s, lambda e: with_sinusoid(
               e, first="sin" if sinusoid_of(e).convention.first == "cos" else "cos"))),
    ZooBug("half_minus_one", "h vs h - 1 in the frequency exponent (downscale_freq_shift 0 vs 1)",
           ("hojonathanho/diffusion#15",), "sinusoid", "half vs half - 1", SINUSOID,
           lambda f, s: embedder_case(f, s, other_shift)),
    ZooBug("interleaved", "interleaved [sin, cos, sin, ...] for concatenated halves",
           ("facebookresearch/DiT#78", "huggingface/diffusers#3981", "huggingface/blog#2183"), "sinusoid",
           "concatenated vs interleaved", SINUSOID,
           lambda f, s: embedder_case(f, s, lambda e: with_sinusoid(e, layout="interleaved"))),
    ZooBug("max_period", "another max_period (1000 for 10000)",
           ("willisma/SiT#24", "ArchiMickey/Just-a-DiT#9"), "sinusoid", "a different max_period", SINUSOID,
           lambda f, s: embedder_case(f, s, lambda e: with_sinusoid(e, max_period=1000.0))),
    ZooBug("half_precision_phase", "the sinusoid computed in bfloat16 (its phase t * w rounded)",
           ("apache/tvm#15811", "modelscope/DiffSynth-Studio#1025"), "sinusoid", "sinusoid computed in bfloat16",
           SINUSOID, lambda f, s: embedder_case(f, s, lambda e: with_sinusoid(e, cls=HalfPhaseSinusoid))),
    ZooBug("activation_on_sinusoid", "SiLU applied to the sinusoid before the MLP",
           ("dome272/Diffusion-Models-pytorch#27",), "time embedding", "an activation on the sinusoid", ALL,
           lambda f, s: embedder_case(f, s, activation_first)),
    ZooBug("post_act_dropped", "the SiLU after the time MLP dropped (EDM's emb = silu(...)), or doubled",
           ("filipbasara0/simple-diffusion#6",), "time embedding", "final activation dropped", POST_ACT,
           lambda f, s: embedder_case(f, s, without_post_act)),
    ZooBug("shift_scale_swapped", "the modulation's shift and scale chunks swapped (swap_scale_shift forgotten)",
           ("PKU-YuanGroup/Open-Sora-Plan#459", "huggingface/diffusers: scripts/convert_hunyuan_video_to_diffusers.py"),
           "modulation", "modulation order", tuple(MODULATIONS),
           lambda f, s: model_case(f, s, lambda m: swap_chunks(m, MODULATIONS[f][0]))),
    ZooBug("silu_before_projection", "the SiLU in front of a block's projection of the time embedding dropped",
           ("labmlai/annotated_deep_learning_paper_implementations#165",), "modulation", "SiLU before the projection",
           tuple(MODULATIONS), lambda f, s: model_case(f, s, lambda m: no_silu_before(m, MODULATIONS[f][1]))),
]  # fmt: skip


def run_one(bug: ZooBug, family: str, seed: int = 0) -> ZooResult:
    start = time.perf_counter()
    case = bug.plant(family, seed)
    verdict: PortVerdict = verify_port(**case)
    seconds = time.perf_counter() - start
    if verdict.parted is None:
        return ZooResult(bug.name, family, False, "", "", False, seconds)
    cause = verdict.causes[0] if verdict.causes else ""
    expected = verdict.parted.kind == bug.stage and bug.cause in cause
    return ZooResult(bug.name, family, True, verdict.parted.name, cause, expected, seconds)


def run_zoo(bugs=None, families=None, seed: int = 0) -> list[ZooResult]:
    """Every bug of ``bugs`` (default `ZOO`) on every family it applies to (within ``families``)."""
    chosen = [b for b in ZOO if bugs is None or b.name in bugs]
    for family in {f for b in chosen for f in b.families if f in TINY_MODELS}:
        family_model(family)  # diffusers and each model's module imported once, before any check is timed
    return [run_one(b, f, seed) for b in chosen for f in b.families if families is None or f in families]


def false_alarms(families=None, seed: int = 0) -> list[tuple[str, str, PortVerdict]]:
    """Correct pairs per family: ``(family, pair, verdict)``; every verdict should agree."""
    out = []
    for family in families or ALL:
        ref = family_embedder(family, seed)
        t = family_timesteps(family, seed)
        out.append((family, "a copy", verify_port(ref, copy.deepcopy(ref), t)))
        proj = ref.time_proj.inner if isinstance(ref.time_proj, InModelDtype) else ref.time_proj
        if isinstance(proj, SinusoidalEmbedding) and not proj.precise:
            out.append((family, "float64 sinusoid", verify_port(ref, _precise(ref), t)))
        if family in TINY_MODELS:
            model, inputs, steps = family_model(family)
            unet = family in ("ddpm", "stable_diffusion", "sdxl")  # a UNet's sinusoid is in its config, not its weights
            embedder = TimestepEmbedder.from_state_dict(model.state_dict(), family=family if unet else None)
            out.append(
                (family, "model vs embedder", verify_port(model, embedder, steps, inputs=inputs, candidate_inputs={}))
            )
    return out


def _precise(ref: TimestepEmbedder) -> TimestepEmbedder:
    """The same weights with the float64 sinusoid (rounded once): a correct port whose float32 rounding differs."""
    out = copy.deepcopy(ref)
    sinusoid_of(out).precise = True
    return out


_SHORT = {
    "timestep": "t",
    "sinusoid input": "input",
    "sinusoid": "sinusoid",
    "time embedding": "MLP",
    "modulation": "mod.",
}


def zoo_table(results: list[ZooResult], alarms: list[tuple[str, str, PortVerdict]] | None = None) -> str:
    """Markdown: per bug class its sources, families, detections and the cause named (for its first
    family); then the class x family grid (each cell: the stage where verify_port parted, as expected
    in bold-free text, ``MISS`` otherwise); then the false alarms on correct pairs."""
    by_bug: dict[str, list[ZooResult]] = {}
    for r in results:
        by_bug.setdefault(r.bug, []).append(r)
    lines = [
        "| bug class | reported in | detected | first differing stage | cause named (first family) |",
        "|---|---|---:|---|---|",
    ]
    for bug in ZOO:
        rs = by_bug.get(bug.name, [])
        if not rs:
            continue
        ok = sum(r.detected and r.expected for r in rs)
        note = f" ({bug.note})" if bug.note else ""
        texts = (
            f"{bug.title}{note}",
            ", ".join(bug.sources),
            f"{ok}/{len(rs)}",
            rs[0].stage.split(" [")[0],
            rs[0].cause,
        )
        lines.append("| " + " | ".join(c.replace("|", "/") for c in texts) + " |")  # a | would split the cell
    families = [f for f in ALL if any(r.family == f for r in results)]
    lines += ["", "| bug class | " + " | ".join(families) + " |", "|---|" + "---|" * len(families)]
    for bug in ZOO:
        cells = {r.family: r for r in by_bug.get(bug.name, [])}
        if not cells:
            continue
        row = []
        for f in families:
            c = cells.get(f)
            row.append(
                ""
                if c is None
                else (_SHORT.get(c.stage.split(" (")[0], c.stage) if c.detected and c.expected else "MISS")
            )
        lines.append(f"| {bug.name} | " + " | ".join(row) + " |")
    if alarms is not None:
        raised = [(f, p, v) for f, p, v in alarms if not v.agree]
        lines += ["", f"Correct pairs: {len(alarms)} checked, {len(raised)} false alarms."]
        lines += [f"- false alarm: {f}, {p}: {v.parted.name if v.parted else ''}" for f, p, v in raised]
    return "\n".join(lines) + "\n"
