"""Fill the serving knobs a file leaves to the engine: the serving stack's documented defaults
(catalog/serving_stacks.yaml), formats a source did not publish, and the batch limits trtllm-bench derives for
itself. Every filled knob is noted with its reason; nothing here reads a measurement.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from narrowpath.catalog.serving import serving_stack
from narrowpath.catalog.store import release_from
from narrowpath.cost.serving_memory import ServingMemory, serving_memory
from narrowpath.spec.device import Device
from narrowpath.spec.serving import ServingScenario, serving_consistency
from narrowpath.workload.counts import parameter_count
from narrowpath.workload.serving import VALUE_BYTES, Formats

TRTLLM_MAX_REQUESTS = 4096
"""trtllm-bench caps the requests its heuristic sizes for (decoder buffers), before dividing by pp."""
TRTLLM_MAX_TOKENS = 32768
"""... and the token budget (activation buffers)."""
TRTLLM_BATCH_TABLE = ((144, 128), (336, 256), (672, 512), (832, 768), (1280, 1024), (1664, 1536))
"""TensorRT-LLM DynamicBatchConfig.kDefaultBatchSizeTable: (capacity below, run-time batch)."""
TRTLLM_BATCH_GRANULARITY = 512
TRTLLM_BATCH_FALLBACK_THRESHOLD = 128


def trtllm_runtime_batch(capacity: int) -> int:
    """Run-time batch size TensorRT-LLM's dynamic batch tuner picks for a KV cache that holds `capacity` sequences
    of the average length (DynamicBatchTuner::getRuntimeBatchSize): the table's entry, else capacity rounded down
    to 512 when within 128 of it."""
    for limit, bs in TRTLLM_BATCH_TABLE:
        if capacity < limit:
            return bs
    threshold = capacity // TRTLLM_BATCH_GRANULARITY * TRTLLM_BATCH_GRANULARITY
    return threshold if capacity < threshold + TRTLLM_BATCH_FALLBACK_THRESHOLD else capacity


VLLM_LARGE_GPU_BYTES = 70 * 2**30
"""vLLM's 'large GPU' threshold for its default batch limits (70 GiB of device memory)."""


def vllm_default_limits(device: Device, offline: bool) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM V1 takes when neither is given (vllm/engine/arg_utils.py,
    EngineArgs._set_default_args / get_batch_defaults, v0.11 to v0.27): on a device of at least 70 GiB whose name is
    not an A100's ('for GPUs like H100 and MI300x, use larger default values') 1,024 sequences and 16,384 tokens for
    the offline `LLM` class (what `vllm bench throughput` runs) or 8,192 for the OpenAI-compatible server; on any
    other device 256 sequences and 8,192 / 2,048 tokens. A100s take the small values whatever their memory ('Setting
    large max_num_batched_tokens for A100 reduces throughput', PR #17885). vLLM 0.28 adds a tier for devices of at
    least 160 GiB (the server's budget 16,384), not modelled: this entry follows the 0.11-0.27 releases."""
    large = device.hbm.capacity_bytes >= VLLM_LARGE_GPU_BYTES and "a100" not in device.name.lower()
    if large:
        return 1024, (16384 if offline else 8192)
    return 256, (8192 if offline else 2048)


VLLM_MIN_BATCHED_TOKENS = 2048
"""vLLM's floor on the token budget without chunked prefill: max(max_model_len, 2048) (SchedulerConfig)."""


def vllm0_token_budget(context_len: int, longest_request: float, chunked: bool,
                       chunked_budget: int) -> tuple[int, str]:
    """(max_num_batched_tokens, why) of vLLM's V0 engine when it is not given (SchedulerConfig, v0.4-v0.7): with
    chunked prefill the engine's chunk budget (`chunked_budget`: 512, 2,048 from v0.6.5, PR #10544), else
    max(max_model_len, 2048), max_model_len being the model's context limit; a model that states none
    (`context_len` 0) has its longest request stand for it, the least max_model_len that serves the load."""
    if chunked:
        return chunked_budget, f"vLLM V0's chunked-prefill token budget ({chunked_budget})"
    if context_len:
        return max(context_len, VLLM_MIN_BATCHED_TOKENS), \
            f"vLLM V0's max(max_model_len {context_len}, {VLLM_MIN_BATCHED_TOKENS}) without chunked prefill"
    limit = int(math.ceil(longest_request))
    return max(limit, VLLM_MIN_BATCHED_TOKENS), \
        (f"vLLM V0's max(max_model_len, {VLLM_MIN_BATCHED_TOKENS}) without chunked prefill, the model stating no "
         f"context limit: the longest request's {limit} tokens stand for max_model_len")


def vllm0_auto_chunking(model, plan, threshold: int) -> bool:
    """Whether vLLM's V0 engine turns chunked prefill on by itself (EngineArgs.create_engine_config from PR #6666,
    v0.5.3-v0.7, then _set_default_args_v0: 'Chunked prefill is enabled by default for models with max_model_len >
    32K' on a GPU, unless the model has a sliding window or the engine runs speculative decoding; never for an MLA
    model, for which V0 forces it off from v0.7.1, 'MLA is enabled; forcing chunked prefill and prefix caching to be
    disabled'). The release (`long_context_chunking_from`) is checked by the caller."""
    return model.context_len > threshold and not model.sliding_window and not plan.spec_tokens and model.mla is None


SGLANG_MIB_TABLE = ((20, 2048, 8, 8), (35, 2048, 24, 80), (60, 4096, 32, 160), (90, 8192, 256, 512),
                    (160, 8192, 256, 512))
"""SGLang's defaults by GPU memory (ServerArgs._handle_gpu_memory_settings, v0.5): (memory below, in GiB of MiB
units; chunked_prefill_size; cuda_graph_max_bs at tp < 4; at tp >= 4). Larger GPUs (B200): 16,384 and 512."""
SGLANG_MAX_RUNNING = 2048
"""SGLang's request pool's floor (sglang_request_pool), the max_batch a plan takes until the KV pool is known."""
SGLANG_POOL_CAP = 4096


def sglang_request_pool(kv_tokens: int, context_len: int) -> int:
    """SGLang's request pool when max_running_requests is not given (ModelRunner.init_memory_pool, later
    resolve_max_num_reqs): int(KV tokens / context length × 512) held within [2,048, 4,096], the context length
    being the model's limit (its config's max_position_embeddings unless --context-length is given). A model that
    states no limit takes the floor, which holds whenever the limit exceeds a quarter of the KV tokens (every
    128k-context model on one GPU's pool)."""
    if not context_len:
        return SGLANG_MAX_RUNNING
    return min(max(int(kv_tokens / context_len * 512), SGLANG_MAX_RUNNING), SGLANG_POOL_CAP)


def sglang_default_limits(device: Device, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang v0.5 takes when neither is given, by the GPU's memory and
    the tensor-parallel degree (sglang/srt/server_args.py, ServerArgs._handle_gpu_memory_settings; its comments name
    H100 for < 90 GB, H20 / H200 for < 160 GB, B200 above)."""
    mib = device.hbm.capacity_bytes / 2**20
    for below_gib, chunk, small_tp, big_tp in SGLANG_MIB_TABLE:
        if mib < below_gib * 1024:
            return chunk, (big_tp if tp >= 4 else small_tp)
    return 16384, 512


def sglang_graph_sizes(max_bs: int) -> tuple[int, ...]:
    """SGLang's captured decode batch sizes up to `max_bs` (ServerArgs._generate_cuda_graph_batch_sizes, v0.5):
    1, 2, 4, 8, 12, every 8 from 16 to 256, every 16 from 272 below 512, every 32 from 512."""
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    return tuple(b for b in sizes if b <= max_bs)


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-lane limits of a resolved deployment."""

    max_batch: int
    max_num_tokens: int
    block_tokens: int
    kv_fraction: float
    memory: ServingMemory

    def lane_blocks(self, pp: int) -> int:
        """KV blocks one lane holds: its attention-DP rank's cache shared by the pp micro-batches in flight."""
        return self.memory.kv_tokens // pp // self.block_tokens


def trtllm_bench_limits(scn: ServingScenario, isl: float, osl: float, fraction: float, max_isl: float,
                        chunked: bool) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) as trtllm-bench sizes them when not given (TensorRT-LLM
    tensorrt_llm/bench/build/tuning.py calc_engine_setting + finetune_setting, called from
    bench/benchmark/utils/general.py get_settings with the run's --tp and --pp): the memory of the tp·pp GPUs
    less the engine (parameters × bytes per element), times the KV fraction, over one request's KV at ISL + OSL
    (2 · layers · max(tp, kv_heads) · head_size · KV bytes per token: every tp rank counted with at least one kv
    head) gives the requests it can hold, capped at 4096 and divided by pp → batch rounded up to a multiple of 32
    (at least 64) below 256, of 128 below 1024, else of 256; tokens = batch · (1 + ISL/OSL) capped at 32768,
    rounded up to 256 (at least 2048) below 4096, to 512 below 8192, else to 1024. trtllm-bench's --tp is the
    instance's tp·dp (attention data parallelism is an LLM-API option on top of it), so the heuristic does not
    divide by dp and each attention-DP rank gets the whole figure. Without chunked prefill the token budget is
    raised to the longest prompt + the batch, so that a prompt always fits beside the running decodes
    (get_settings: "Forcing max_num_tokens to max_isl + max_batch_size")."""
    m, p = scn.model, scn.plan
    tp_size = p.tp * p.dp
    engine = parameter_count(m) * VALUE_BYTES[p.weight_precision]
    total = scn.system.device.hbm.capacity_bytes * tp_size * p.pp
    per_token = 2 * m.layers * max(tp_size, m.kv_heads) * m.head_dim * VALUE_BYTES[p.kv_precision]
    requests = max(0.0, (total - engine) * fraction / (per_token * (isl + osl)))
    raw_bs = min(requests, TRTLLM_MAX_REQUESTS) / p.pp
    raw_tok = min(raw_bs * (1 + isl / osl), TRTLLM_MAX_TOKENS)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tok < 4096:
        tok = max(2048, 256 * math.ceil(raw_tok / 256))
    elif raw_tok < 8192:
        tok = 512 * math.ceil(raw_tok / 512)
    else:
        tok = 1024 * math.ceil(raw_tok / 1024)
    if not chunked:
        tok = max(tok, int(max_isl) + bs)
    return int(bs), int(tok)


def resolve_layout_defaults(scn: ServingScenario, open_knobs: tuple[str, ...]
                            ) -> tuple[ServingScenario, tuple[str, ...]]:
    """Unpublished layout knobs (tp, pp, ep) that the serving stack defines a default for take it (the engine runs
    that value when its command does not set one); the rest stay open for schedule.serving_choose. An MoE model's
    ep default that does not divide its experts or the stage stays open."""
    stack = serving_stack(scn.plan.framework)
    table = stack.get("layout_defaults") or {}
    p, notes, still = scn.plan, list(scn.chosen), []
    for knob in open_knobs:
        if knob in ("tp", "pp", "ep") and knob in table:
            trial = dataclasses.replace(p, **{knob: int(table[knob])})
            if not serving_consistency(scn.model, trial, scn.num_gpus, scn.system):
                p = trial
                notes.append((knob, f"{table[knob]} — default of the {stack['id']} stack (not published)"))
                continue
        still.append(knob)
    return dataclasses.replace(scn, plan=p, chosen=tuple(notes)), tuple(still)


def resolve_formats(scn: ServingScenario, open_knobs: tuple[str, ...]) -> ServingScenario:
    """Weight and KV formats a source left open: the stack's checkpoint format, and for fp8/fp4 weights the KV
    format its quantized checkpoints carry (else the 16-bit type of the weights)."""
    stack = serving_stack(scn.plan.framework)
    p, notes = scn.plan, list(scn.chosen)
    half = scn.system.device.half_format  # a 16-bit format is the device's own: fp16 on Volta, which has no BF16
    if "weight_precision" in open_knobs:
        w = stack["defaults"].get("weight_precision", "bf16")
        w, why = (half, f"the {stack['id']} stack's bf16 checkpoint, run in {half} on {scn.system.device.name}") \
            if w == "bf16" and half != "bf16" else (w, f"checkpoint format of the {stack['id']} stack")
        p = dataclasses.replace(p, weight_precision=w)
        notes.append(("weight_precision", f"{w} — {why} (not published)"))
    if "kv_precision" in open_knobs:
        quant = p.weight_precision in ("fp8", "fp4")
        kv = stack.get("quantized_kv", half) if quant else ("fp16" if p.weight_precision == "fp16" else half)
        if kv in ("fp8", "fp4") and "fp8" not in scn.system.device.peak_matrix_flop_per_s:
            kv = half
        why = f"the {stack['id']} stack's quantized checkpoints carry it" if quant else "the weights' 16-bit type"
        p = dataclasses.replace(p, kv_precision=kv)
        notes.append(("kv_precision", f"{kv} — {why} (not published)"))
    return dataclasses.replace(scn, plan=p, chosen=tuple(notes))


def resolve_limits(scn: ServingScenario) -> tuple[ServingScenario, Limits]:
    """The plan with policy, admission, chunking, block size, KV fraction and batch limits set (stack defaults,
    trtllm-bench's heuristic, or the load's fixed batch), and the memory they leave for the KV cache."""
    stack = serving_stack(scn.plan.framework)
    d = stack.get("defaults") or {}
    p, load, notes = scn.plan, scn.load, list(scn.chosen)
    kw: dict = {}

    def take(knob: str, value, why: str) -> None:
        kw[knob] = value
        notes.append((knob, f"{value!r} — {why}"))

    auto_chunk = stack.get("long_context_chunking")
    auto = bool(auto_chunk) and p.chunked_prefill is None and vllm0_auto_chunking(scn.model, p, auto_chunk) and \
        release_from(stack, p.framework, stack.get("long_context_chunking_from"))
    chunked = True if auto else (d.get("chunked_prefill") if p.chunked_prefill is None else p.chunked_prefill)
    if not p.policy:
        if load.arrival == "fixed-batch":
            take("policy", "static", "the load is a static batch")
        elif chunked and stack.get("chunked_policy"):  # the engine schedules otherwise once it chunks prompts
            take("policy", stack["chunked_policy"], f"the {stack['id']} stack's scheduler with chunked prefill")
        else:
            take("policy", d.get("policy", "decode-first"), f"default of the {stack['id']} stack")
    if kw.get("policy", p.policy) == "static" and not p.kv_memory_fraction and stack.get("host_sync_per_step"):
        take("kv_memory_fraction", 1.0, "a static batch's KV cache is allocated whole, not as a share of the free "
             "memory (TensorRT-LLM 0.x GptSession)")  # a static session's; other engines keep their own fraction
    if auto:
        take("chunked_prefill", True, f"vLLM V0 turns it on by itself for a context limit above {auto_chunk} "
             f"tokens (the model's {scn.model.context_len})")
    for knob, empty in (("admission", ""), ("chunked_prefill", None), ("kv_block_tokens", 0),
                        ("kv_memory_fraction", 0.0)):
        if getattr(p, knob) == empty and knob not in kw:
            take(knob, d[knob], f"default of the {stack['id']} stack")
    p = dataclasses.replace(p, **kw)
    kw = {}
    if load.arrival == "trace":
        isl = sum(r[1] for r in load.requests) / len(load.requests)
        osl = sum(r[2] for r in load.requests) / len(load.requests)
    else:
        isl, osl = float(load.input_tokens), float(load.output_tokens)
    longest = max(r[1] + r[2] for r in load.requests) if load.arrival == "trace" else isl + osl
    limit = scn.model.context_len
    if limit and longest > limit and "context limit" not in dict(notes):  # said once, however often resolved
        notes.append(("context limit", f"requests of up to {longest:.0f} tokens exceed the model's {limit}-token "
                      "limit (model.context_len): an engine started at it refuses them (vLLM's max_model_len); "
                      "priced as if served"))
    if p.policy == "static":
        per_lane = max(1, -(-load.batch_size // (p.replicas * p.dp * p.pp))) if load.batch_size else 0
        if not p.max_batch:
            take("max_batch", per_lane or d.get("max_batch", 256), "the static batch per micro-batch")
        if not p.max_num_tokens:
            take("max_num_tokens", int((kw.get("max_batch") or p.max_batch) * isl), "the whole batch's prompts")
    elif not (p.max_batch and p.max_num_tokens):
        tok_why = None  # the token budget's own reason, where it differs from the batch limit's
        if stack.get("batch_limits") == "trtllm-bench":
            max_isl = max(r[1] for r in load.requests) if load.arrival == "trace" else isl
            bs, tok = trtllm_bench_limits(dataclasses.replace(scn, plan=p), isl, osl, p.kv_memory_fraction, max_isl,
                                          bool(p.chunked_prefill))
            why = f"trtllm-bench's heuristic for ISL {isl:g} / OSL {osl:g}"
        elif stack.get("batch_limits") == "vllm":
            offline = load.arrival == "offline" and not load.concurrency  # all queued at once: the LLM class
            bs, tok = vllm_default_limits(scn.system.device, offline)
            why = (f"vLLM's default for {'the offline LLM class' if offline else 'its OpenAI server'} on "
                   f"{scn.system.device.name}")
        elif stack.get("batch_limits") == "vllm-0":
            bs, why = d["max_batch"], f"default of the {stack['id']} stack (max_num_seqs)"
            tok, tok_why = vllm0_token_budget(scn.model.context_len, longest, bool(p.chunked_prefill),
                                              int(stack["chunked_budget"]))
        elif stack.get("batch_limits") == "sglang":
            tok, graph_bs = sglang_default_limits(scn.system.device, p.tp)
            bs = SGLANG_MAX_RUNNING  # capped at half the KV tokens below, once the pool is known
            why = (f"SGLang's default on {scn.system.device.name} (chunked_prefill_size; the running requests follow "
                   "from the KV pool once it is known: see 'max running requests')")
            if not p.graph_batch_sizes:
                take("graph_batch_sizes", sglang_graph_sizes(graph_bs),
                     f"SGLang's capture list to cuda_graph_max_bs {graph_bs} on {scn.system.device.name} at tp {p.tp}")
        else:
            bs, tok = d.get("max_batch", 256), d.get("max_num_tokens", 8192)
            why = f"default of the {stack['id']} stack"
        if not p.max_batch:
            take("max_batch", bs, why)
        if not p.max_num_tokens:
            take("max_num_tokens", tok, tok_why or why)
    p = dataclasses.replace(p, **kw)
    scn = dataclasses.replace(scn, plan=p, chosen=tuple(notes))
    f = Formats.of(p, "fp8" in scn.system.device.peak_matrix_flop_per_s, scn.model)
    mem = serving_memory(scn.model, p, scn.system, f, max_num_tokens=p.max_num_tokens, max_batch=p.max_batch,
                         kv_fraction=p.kv_memory_fraction, block_tokens=p.kv_block_tokens,
                         fraction_of_total=stack.get("kv_fraction_of") == "total")
    max_seqs = p.max_batch
    if stack.get("batch_limits") == "sglang" and dict(notes).get("max_batch", "").startswith(
            f"{SGLANG_MAX_RUNNING} — SGLang"):  # filled here (now or by an earlier pass), not stated
        tokens = int(mem.kv_tokens // p.pp)
        pool = sglang_request_pool(tokens, scn.model.context_len)
        running = min(pool, tokens // 2)  # max_running_requests = min(the request pool, KV tokens // 2)
        if running != max_seqs:
            max_seqs = running
            if "max running requests" not in dict(notes):
                why = (f"SGLang's half of the KV pool's {tokens} tokens" if running < pool else
                       f"SGLang's request pool for {tokens} KV tokens at a context limit of {scn.model.context_len}")
                notes.append(("max running requests", f"{running} — {why}"))
                scn = dataclasses.replace(scn, chosen=tuple(notes))
    if stack.get("runtime_batch_tuning") and p.policy != "static":
        capacity = int(mem.kv_tokens // p.pp / mem.footprint(isl + osl))
        tuned = trtllm_runtime_batch(capacity)
        if tuned < max_seqs:
            max_seqs = tuned
            notes.append(("runtime batch", f"{tuned} — TensorRT-LLM's dynamic batch tuning for a KV cache holding "
                          f"{capacity} sequences of {isl + osl:g} tokens (max_batch {p.max_batch})"))
            scn = dataclasses.replace(scn, chosen=tuple(notes))
    return scn, Limits(max_seqs, p.max_num_tokens, p.kv_block_tokens, p.kv_memory_fraction, mem)
