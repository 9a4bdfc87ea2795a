"""Plan: how a model is parallelised and run — the knobs an engineer turns."""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.errors import SpecError, shown
from narrowpath.spec._check import as_int, boolean, choice, positive_float, positive_int

AXES = ("tp", "cp", "ep", "dp", "pp")
PRECISIONS = ("fp32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")
LOW_PRECISIONS = ("fp8", "mxfp8", "nvfp4")
"""Matrix-multiply formats of Transformer Engine recipes that keep BF16 activations, weights and master copies:
per-tensor-scaled FP8 (Hopper and later), MXFP8 (32-element blocks with E8M0 scales, Blackwell) and NVFP4
(16-element blocks with E4M3 scales plus a per-tensor scale, Blackwell)."""
MOE_ROUTING = ("dropless", "dropless-balanced", "token-drop")
MOE_PROBS = ("activation", "combine")
"""Where an MoE layer multiplies the expert outputs by their routing probabilities (plan.moe_probs)."""
EP_DISPATCH = ("all_to_all", "dedup")
EP_DISPATCH_FORMAT = ("default", "fp8")
"""What the MoE exchange moves: 16-bit tokens both ways, or DeepSeek-V3's FP8 dispatch (plan.ep_dispatch_format)."""
RECOMPUTE = ("none", "selective", "full")
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "shared_experts", "moe",
                     "alternate_matmuls")
"""Megatron-Core's selective recompute modules (TransformerConfig.recompute_modules), and torchtitan's op-level
selective checkpointing (`alternate_matmuls`; workload.recompute)."""
OPTIMIZER_MOMENTS = ("fp32", "bf16")
"""Formats of Adam's two moments (Megatron-Core precision-aware optimizer: exp_avg_dtype, exp_avg_sq_dtype)."""
GRAD_PRECISION = ("auto", "fp32", "bf16")
"""Formats of the gradient buffer and its data-parallel reduction: `auto` (the training format's convention), fp32 or
bf16 (Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32 true / false)."""
CROSS_ENTROPY = ("unfused", "te")
"""The loss's kernels (Plan.cross_entropy, workload.loss)."""
FP8_PARAMS_ZERO_STAGES = (1, 3)
"""ZeRO stages FP8 primary weights run with (Megatron-LM: '--fp8-param-gather only supported with distributed
optimizer' or FSDP)."""
ACTIVATION_CACHE = ("default", "fp8")
"""How a layer stores what it keeps for backward: as its framework keeps it, or DeepSeek-V3's low-precision storage."""
ATTENTION = ("auto", "flash", "flash2", "unfused")
ZERO3_RESHARD = ("always", "never", "unless_pp")
CP_COMM = ("p2p", "all_gather", "a2a")
GRAD_SYNC_LAUNCH = ("hooks", "megatron", "aligned")
PIPELINE_SCHEDULES = ("auto", "dualpipe", "dualpipev")
"""`auto`: Megatron's 1F1B, interleaved when vpp > 1; `dualpipe`: DeepSeek-V3's bidirectional schedule;
`dualpipev`: DualPipe cut in half along its V (one copy of the model, two chunks per rank)."""
MAX_BATCH = 1 << 30
"""Largest micro- or global batch accepted, sequences (a typo of 1e47 would otherwise price a step of 1e45 s)."""


def zero3_kept_gathered(reshard: str, pp):
    """Whether ZeRO-3 weights stay gathered through a step's micro-batches under `reshard` (plan.zero3_reshard) at
    `pp` pipeline stages; `pp` may be an array (the search prices many plans at once)."""
    if reshard == "unless_pp":
        return pp > 1
    return reshard == "never"


def check_modules_need_selective(field: str, recompute: str, modules) -> None:
    """Refuse recompute modules named under another mode than `selective` (which is the only one that reads them),
    naming `field` (the plan field, or a command-line flag)."""
    if modules and recompute != "selective":
        raise SpecError(field, f"names what selective recompute recomputes; needs recompute: selective, got "
                        f"{shown(recompute)}")


def check_launch_is_read(field: str, plan: "Plan") -> None:
    """Refuse a gradient-sync launch mode named for a plan that never reads it (schedule.chunks.sync_launch_mode
    reads it only for an overlapped sync on Megatron's 1F1B or interleaved pipeline), naming `field` (a command-line
    flag: a software stack's default is set for every plan and stays silent)."""
    if not plan.dp_overlap:
        raise SpecError(field, "says when the buckets of an overlapped gradient sync are launched; needs dp_overlap "
                        "(--dp-overlap)")
    if plan.pp == 1 or plan.schedule not in ("1f1b", "interleaved-1f1b"):
        raise SpecError(field, f"applies to Megatron's pipelined schedules (1F1B, interleaved; pp > 1); this plan "
                        f"runs {'no pipeline' if plan.pp == 1 else plan.schedule}, where each bucket is launched as "
                        "it is ready (hooks)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A parallel plan. Degrees multiply: tp·cp·dp·pp = GPUs; ep subdivides dp·cp ranks for experts."""

    tp: int = 1
    """Tensor-parallel degree (Megatron column/row split of every matrix)."""
    pp: int = 1
    """Pipeline-parallel stages."""
    dp: int = 1
    """Data-parallel replicas."""
    cp: int = 1
    """Context-parallel degree (sequence split across ranks for attention)."""
    ep: int = 1
    """Expert-parallel degree (MoE only); 1 = experts replicated."""
    etp: int = 0
    """Expert tensor-parallel degree: how many ways each expert's matrices are split (Megatron-Core
    --expert-tensor-parallel-size). The expert layout etp·ep·edp re-factors the same tp·cp·dp ranks as the dense
    layout. 0 = tp (Megatron-Core's default); Megatron-Bridge's MoE recipes set 1 (whole experts per rank)."""
    vpp: int = 1
    """Virtual pipeline chunks per stage; 1 = plain 1F1B, >1 = interleaved 1F1B."""
    vp_group: int = 0
    """Interleaved 1F1B (vpp > 1): micro-batches run through one chunk before the schedule moves to the next
    (Megatron-Core `microbatch_group_size_per_vp_stage`, `get_schedule_table`); 0 = pp, its default. Megatron-Core
    takes a group between pp and the micro-batches, and a last group (micro-batches mod group) of none or at least
    pp ('dependency bubbles' otherwise), so a group above pp runs micro-batch counts pp does not divide; each rank
    then warms up with (vpp − 1) · group chunk forwards beyond its 2 · (pp − rank − 1) (`get_pp_rank_microbatches`),
    holding more activations (cost.memory.in_flight_chunk_passes). `interleave_group` is the group in effect."""
    mbs: int = 1
    """Micro-batch size, sequences."""
    gbs: int = 1
    """Global batch size per optimizer step, sequences (at most MAX_BATCH)."""
    zero_stage: int = 0
    """0 none; 1 optimizer state sharded over dp (Megatron distributed optimizer); 2 + gradients; 3 + weights."""
    zero3_reshard: str = "always"
    """When ZeRO-3 frees the weights it gathers: `always` (gathered before each micro-batch's forward and again
    before its backward, gradients reduce-scattered after each backward: FSDP's reshard_after_forward=True,
    DeepSpeed stage 3), `never` (gathered once per step and kept through its micro-batches, gradients accumulated
    unsharded and reduce-scattered once after the last: FSDP2 reshard_after_forward=False together with gradient
    sync on the last micro-batch only — the traffic and memory of ZeRO-1: whole 16-bit weights and whole gradients
    in the plan's gradient format), `unless_pp` (`never` with pipeline parallelism, else `always`: torchtitan's
    default, whose pipeline schedules sync FSDP gradients on the last micro-batch only —
    torch.distributed.pipelining `backward_maybe_with_nosync`). FSDP2 without resharding but with gradient sync on
    every micro-batch (one gather, a reduce-scatter per micro-batch) has no level here."""
    recompute: str = "none"
    """`none`; `selective` (attention core recomputed, Korthikanti et al.); `full` (whole layer from its input)."""
    recompute_modules: tuple[str, ...] = ()
    """With recompute `selective`: the parts of each layer recomputed (Megatron-Core --recompute-modules):
    core_attn, layernorm, mla_up_proj, moe_act, mlp, shared_experts, moe, and torchtitan's op-level policy
    alternate_matmuls (workload.recompute). Empty = core_attn.
    Read only under `selective` (a plan the search derives with another mode keeps the list unused)."""
    recompute_layers: int = 0
    """With recompute `full`: how many layers of each pipeline chunk are recomputed (Megatron --recompute-method
    block --recompute-num-layers N); the others keep all their activations. 0 = every layer."""
    offload_layers: int = 0
    """Layers of each pipeline chunk whose saved activations are copied to host memory during forward and fetched
    back for backward, overlapped with computation (Megatron-Core / Transformer Engine CPU offloading,
    --cpu-offloading-num-layers); 0 = none."""
    optimizer_moments: str = "fp32"
    """Format of Adam's first and second moments: `fp32` (mixed-precision Adam: fp32 master copy and moments, 12
    bytes per parameter; ZeRO §3) or `bf16` (16-bit moments beside the fp32 master copy, 8 bytes: DeepSeek-V3
    §3.3.2 "Low-Precision Optimizer States"; Megatron-Core's precision-aware optimizer with exp_avg_dtype =
    exp_avg_sq_dtype = bf16, which Megatron-Bridge's tuned DeepSeek and MoE recipes set)."""
    grad_precision: str = "auto"
    """Format of the gradients each rank accumulates over its micro-batches and reduces over data parallelism:
    `auto` — fp16 for fp16 runs (Megatron-LM's default), fp32 for fp32 runs and for bf16 and low-precision runs
    (Megatron-LM forces --accumulate-allreduce-grads-in-fp32 with bf16 unless --grad-reduce-in-bf16; NeMo 2's bf16_mixed keeps
    grad_reduce_in_fp32); `fp32` — fp32 whatever the training format (--accumulate-allreduce-grads-in-fp32);
    `bf16` — the 16-bit parameters' format, for bf16 and low-precision runs (Megatron-Core DDP grad_reduce_in_fp32 =
    False: the main_grad buffers and their reduce-scatter in bf16, as NVIDIA's performance recipes run:
    catalog/stacks.yaml). workload.build.grad_bytes_per_param."""
    cross_entropy: str = "unfused"
    """The loss's kernel (workload.loss): `unfused` — Megatron's vocab-parallel cross entropy over an FP32 copy of
    the logits (Megatron-Core's default, cross_entropy_loss_fusion False); `te` — Transformer Engine's fused
    parallel cross entropy in the logits' format, the gradient written in place (cross_entropy_fusion_impl "te",
    which Megatron-Bridge's recipes set: catalog/stacks.yaml)."""
    fp8_params: bool = False
    """FP8 primary weights (Transformer Engine fp8_model_init; Megatron-Core --fp8-param-gather, fp8_param): a
    low-precision run keeps its weights only as the quantized FP8/MXFP8 tensors its GEMMs read, with no 16-bit copy
    beside the optimizer's fp32 master, and ZeRO's parameter all-gather moves them in FP8. Needs precision fp8 or
    mxfp8 (Megatron-Bridge and NeMo refuse NVFP4 primary weights) and ZeRO 1 or 3 (Megatron-LM: only with the
    distributed optimizer or FSDP). Megatron-Bridge's and NeMo's FP8 recipes set it (catalog/stacks.yaml); the
    embedding and output layer keep 16-bit weights (they are not Transformer Engine modules).
    workload.build.held_weight_bytes_per_param."""
    activation_cache: str = "default"
    """What a layer keeps for backward: `default` (each op keeps what its framework keeps: 16-bit tensors, or the
    quantized input of a low-precision GEMM) or `fp8` (DeepSeek-V3 §3.3.2 "Low-Precision Storage": the attention
    output that the output projection reads is cached once in E5M6, and the routed experts' SwiGLU input in FP8,
    its output recomputed in backward; needs a low-precision recipe). workload.precision.CACHE_BYTES."""
    pipeline_schedule: str = "auto"
    """`auto` (Megatron's 1F1B, interleaved with vpp > 1) or `dualpipe` (DeepSeek-V3 §3.2.1: half the micro-batches
    enter at each end of the pipeline, so every rank holds two stages — two copies of the parameters — and runs a
    forward of one direction beside a backward of the other, whose expert all-to-all exchanges hide behind each
    other's computation when `ep_overlap` is on, as DeepSeek-V3 runs it; needs vpp 1, an even pp and an even number
    of micro-batches, at least 2·pp). schedule.pipeline.dualpipe_time_s, cost.memory. `dualpipev` (deepseek-ai/DualPipe
    DualPipeV, PyTorch ScheduleDualPipeV, torchtitan): DualPipe's schedule on one copy of the model in 2·pp virtual
    stages laid out as a V — rank i holds stage i and stage 2·pp − 1 − i, so rank 0 holds the embedding and the
    output layer — every micro-batch running up the ranks and back; needs vpp 2 (its two chunks), at least 2·pp
    micro-batches and the automatic split or chunk_layers (its ends are both on rank 0).
    schedule.sim.programs.order_dualpipev. With pp 1 there is no pipeline and nothing changes."""
    first_stage_layers: int = 0
    """Transformer layers of the first pipeline stage, 0 = the automatic split (Megatron-Core
    --decoder-first-pipeline-num-layers / num_layers_in_first_pipeline_stage; the other stages share the rest
    evenly). workload.split.stage_layer_ranges."""
    last_stage_layers: int = 0
    """Transformer layers of the last pipeline stage, 0 = the automatic split (--decoder-last-pipeline-num-layers):
    fewer layers there make room for the output layer, the loss and multi-token prediction."""
    chunk_layers: tuple[int, ...] = ()
    """Transformer layers of every virtual pipeline chunk, pp·vpp counts in Megatron-Core's order (chunk j on stage
    j mod pp: a round of every stage's first chunks, then of their second ...; under DualPipeV in virtual-stage order
    on its V, `chunk_stage`); () = the automatic or first/last split. Megatron-Core's `pipeline_model_parallel_layout`
    (e.g. Megatron-Bridge's DeepSeek-V3 H100 recipe "Et|(tt|)*30mL": 1, 30 × 2, 0 on pp 8 × vpp 4); the embedding
    stays on the first chunk, the output layer, loss and multi-token prediction on the last. A chunk may hold no
    layer, a stage must hold one."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism: norms/dropout split over tp; TP all-reduce becomes reduce-scatter + all-gather."""
    precision: str = "bf16"
    """Format of the matrix multiplies: fp32, bf16, fp16, or a Transformer Engine low-precision recipe — fp8
    (per-tensor scaling), mxfp8 or nvfp4 (block scaling) — which keeps bf16 activations and weights."""
    dp_overlap: bool = False
    """Gradient sync overlapped with backward in buckets (Megatron --overlap-grad-reduce; default off as there)."""
    grad_sync_launch: str = "hooks"
    """With `dp_overlap`, when the overlapped gradient sync's buckets are launched (schedule.chunks.
    sync_launch_mode): `hooks` — each bucket as soon as the backward makes it ready, on every pipeline rank and
    chunk (PyTorch DDP and FSDP's hooks); `megatron` — Megatron-Core's DDP with --no-align-grad-reduce: only
    pipeline rank 0's first chunk is split into buckets (released by the hooks as they fill), every other chunk is
    one bucket, launched once its last backward is done ("data-parallel communication on these stages is not on the
    critical path"); `aligned` — Megatron-Core's default (align_grad_reduce: `config.grad_sync_func` = each chunk's
    `start_grad_sync`), which on a pipeline keeps the hooks off and launches a chunk whole once a backward is done,
    each rank r backwards after its last one so that the ranks launch about together (1F1B: rank 0's hooks stream
    during its last backward, the other ranks launch after their cool-down)."""
    tp_comm_overlap: bool = False
    """TP communication overlapped with the matrix multiplies (Transformer Engine userbuffers)."""
    attention: str = "auto"
    """Attention kernel: `flash` (the device's fused kernel: cuDNN / Transformer Engine, FlashAttention-3 on
    Hopper), `flash2` (FlashAttention-2, PyTorch `scaled_dot_product_attention`'s flash backend: a flash kernel at
    Device.flash2_rate of the fused one's rate), `unfused` (materialised scores + fused softmax), `auto` (the
    calibration's default)."""
    cp_comm: str = "p2p"
    """How context parallelism exchanges K/V (Megatron-Core `--cp-comm-type`): `p2p` (ring, overlapped with the
    attention blocks; the default), `all_gather` (K/V gathered before attention, exposed; Llama 3), `a2a`
    (all-to-all from sequence- to head-split around attention, exposed; DeepSpeed-Ulysses)."""
    ep_overlap: bool = False
    """MoE dispatch/combine all-to-all overlapped with the computation of another micro-batch (Megatron-Core
    --overlap-moe-expert-parallel-comm, 1F1B A2A overlap; DeepSeek-V3 DualPipe §3.2.1)."""
    ep_dispatch: str = "all_to_all"
    """How MoE tokens reach their experts: `all_to_all` (NCCL all-to-all of every token-expert copy, Megatron-Core's
    alltoall dispatcher) or `dedup` (each token crosses the scale-out fabric once per destination node and is fanned
    out over NVLink there: DeepSeek-V3's dispatch kernels §3.2.2, DeepEP, Megatron-Core's flex dispatcher)."""
    ep_dispatch_format: str = "default"
    """Format of the MoE exchange: `default` (tokens and gradients cross in 16 bit both ways, as Megatron-Core's
    dispatchers send them) or `fp8` (DeepSeek-V3 §3.3.2 "Low-Precision Communication": the activation is quantized
    to FP8 before the dispatch, which the FP8 up-projection reads, and so is the activation gradient before the
    down-projections — the combine's backward; the forward and backward combine stay BF16. DeepEP's FP8 dispatch
    sends one FP32 scale per 128 values beside them). Needs a low-precision recipe. workload.moe.moe_transfers."""
    moe_routing: str = "dropless"
    """`dropless` (learned routing, every token kept: the busiest expert-parallel rank sets the pace),
    `dropless-balanced` (routing forced to balance, as NVIDIA's MoE benchmarks run) or `token-drop` (capacity
    factor caps each expert's tokens)."""
    moe_sync_free: bool = False
    """Dropless MoE layers keep their tokens-per-expert counts on the GPU (`True`: the grouped GEMMs and the
    all-to-all read the counts from device memory — Transformer Engine >= 2.15's fused grouped MLP kernels, "sync-free
    MoE execution", NVIDIA technical blog "Boosting MoE Training Throughput with Advanced Fusion Kernels",
    2026-06-15 — or every expert's input is padded to a fixed capacity) instead of copying them to the host once per
    layer forward (`False`, Megatron-Core's alltoall dispatcher: the host waits for the GPU, then issues the rest of
    the layer while the GPU idles; Op.host_syncs). Priced without the padding's extra rows."""
    cuda_graphs: bool = False
    """Each transformer layer's forward and backward kernels are replayed from CUDA graphs captured once
    (Megatron-Core --cuda-graph-impl transformer_engine, its --cuda-graph-scope over the layer's modules): the host
    launches a graph instead of issuing the kernels one by one, so their per-kernel host cost (the profile's
    host_dispatch_s) goes. An MoE layer that synchronises with the host (dropless routing's counts, not
    moe_sync_free; a clamped GLU's offset copy, workload.moe.expert_path_ops) keeps its expert path eager —
    permute, experts, shared experts, unpermute: Megatron-Core captures only its attention, router and
    dispatcher preprocessing ("Dropless MoE doesn't work with 'moe' scope cudagraph"; the scopes NVIDIA's
    Megatron-Bridge MoE configs set) — and its sync stays. The embedding, the output layer, the loss, multi-token
    prediction and the optimizer stay eager; the graphs' own memory pool is not priced. Megatron-LM refuses CUDA
    graphs with full recompute (arguments.py: "recompute_granularity must not be full when CUDA Graphs are
    enabled"), and so does narrowpath."""
    moe_probs: str = "activation"
    """Where the routing probabilities scale the experts' work: `activation` (Megatron-Core >= 0.13: "memory efficient
    token permutation by moving the probs multiplication from unpermutation to activation function of GroupedMLP" —
    the experts' fused weighted SwiGLU multiplies by the probabilities and the combine is a plain scatter-add that
    keeps nothing for backward) or `combine` (earlier Megatron-Core: the unpermute weights each copy and keeps the
    16-bit expert outputs for the probabilities' gradient, top_k·hidden values per token). workload.moe."""
    framework: str = ""
    """Software stack that ran the plan, free text (e.g. `Megatron-Bridge / NeMo 26.04`); selects the stack's
    defaults for knobs a file leaves out (catalog/stacks.yaml). Empty = the tool's defaults."""
    bucket_bytes: float = 40e6
    """Gradient bucket size for overlapped DP sync, bytes (40 MB: Megatron-LM's 40 M-element bucket taken as bytes;
    Megatron-Core's DDP default is max(40 M, 1 M × dp) elements, PyTorch DDP's 25 MiB — the exposed last bucket
    moves by under 0.1 % of a catalog step between them)."""
    placement: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
    """Rank order of the parallel axes, fastest-varying first (Megatron: tp, cp, dp, pp). `ep` may appear and is
    ignored: expert groups re-factor each stage's tp·cp·dp ranks as etp × ep × edp (network.placement)."""

    def __post_init__(self) -> None:
        as_int(self, "etp", "plan.etp", minimum=0)
        as_int(self, "vp_group", "plan.vp_group", minimum=0, maximum=MAX_BATCH)
        as_int(self, "recompute_layers", "plan.recompute_layers", minimum=0, maximum=100_000)
        as_int(self, "offload_layers", "plan.offload_layers", minimum=0, maximum=100_000)
        as_int(self, "first_stage_layers", "plan.first_stage_layers", minimum=0, maximum=100_000)
        as_int(self, "last_stage_layers", "plan.last_stage_layers", minimum=0, maximum=100_000)
        if isinstance(self.chunk_layers, (str, bytes)) or not isinstance(self.chunk_layers, (list, tuple)):
            raise SpecError("plan.chunk_layers", f"must list the layers of every pipeline chunk, got "
                            f"{shown(self.chunk_layers)}")
        object.__setattr__(self, "chunk_layers", tuple(positive_int("plan.chunk_layers", n, minimum=0, maximum=100_000)
                                                       for n in self.chunk_layers))
        for ax in ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "gbs"):
            as_int(self, ax, f"plan.{ax}", maximum=MAX_BATCH if ax in ("mbs", "gbs") else None)
        if isinstance(self.zero_stage, bool) or self.zero_stage not in (0, 1, 2, 3):
            raise SpecError("plan.zero_stage", f"must be 0, 1, 2 or 3, got {shown(self.zero_stage)}")
        choice("plan.recompute", self.recompute, RECOMPUTE)
        if isinstance(self.recompute_modules, str) or not isinstance(self.recompute_modules, (list, tuple)):
            raise SpecError("plan.recompute_modules", f"must list modules of {', '.join(RECOMPUTE_MODULES)}; got "
                            f"{shown(self.recompute_modules)}")
        object.__setattr__(self, "recompute_modules", tuple(self.recompute_modules))
        for mod in self.recompute_modules:
            choice("plan.recompute_modules", mod, RECOMPUTE_MODULES)
        if len(set(self.recompute_modules)) != len(self.recompute_modules):
            raise SpecError("plan.recompute_modules", f"lists a module twice: {list(self.recompute_modules)}")
        choice("plan.precision", self.precision, PRECISIONS)
        choice("plan.optimizer_moments", self.optimizer_moments, OPTIMIZER_MOMENTS)
        choice("plan.grad_precision", self.grad_precision, GRAD_PRECISION)
        choice("plan.cross_entropy", self.cross_entropy, CROSS_ENTROPY)
        if self.grad_precision == "bf16" and self.precision in ("fp32", "fp16"):
            raise SpecError("plan.grad_precision", f"bf16 gradients need bf16 parameters (a bf16 or low-precision "
                            f"run); a {self.precision} run keeps them in fp32 or its own format (auto), got "
                            f"precision {self.precision!r}")
        boolean("plan.fp8_params", self.fp8_params)
        if self.fp8_params and self.precision not in ("fp8", "mxfp8"):
            raise SpecError("plan.fp8_params", f"keeps the weights in FP8; needs precision fp8 or mxfp8, got "
                            f"{self.precision!r}")
        if self.fp8_params and self.zero_stage not in FP8_PARAMS_ZERO_STAGES:
            raise SpecError("plan.fp8_params", f"needs zero_stage 1 or 3 (Megatron-LM: '--fp8-param-gather only "
                            f"supported with distributed optimizer' or FSDP), got {self.zero_stage}")
        choice("plan.activation_cache", self.activation_cache, ACTIVATION_CACHE)
        if self.activation_cache == "fp8" and self.precision not in LOW_PRECISIONS:
            raise SpecError("plan.activation_cache", f"fp8 caches the inputs of FP8 matrix multiplies; needs a "
                            f"low-precision recipe ({', '.join(LOW_PRECISIONS)}), got precision {self.precision!r}")
        choice("plan.attention", self.attention, ATTENTION)
        choice("plan.zero3_reshard", self.zero3_reshard, ZERO3_RESHARD)
        choice("plan.cp_comm", self.cp_comm, CP_COMM)
        choice("plan.grad_sync_launch", self.grad_sync_launch, GRAD_SYNC_LAUNCH)
        choice("plan.pipeline_schedule", self.pipeline_schedule, PIPELINE_SCHEDULES)
        if self.pipeline_schedule == "dualpipe" and self.vpp != 1:
            raise SpecError("plan.pipeline_schedule", f"dualpipe runs one chunk per direction on each rank; needs vpp "
                            f"1, got vpp {self.vpp}")
        if self.pipeline_schedule == "dualpipev" and self.pp > 1:
            if self.vpp != 2:
                raise SpecError("plan.vpp", f"dualpipev runs two chunks on each rank (the two arms of its V); needs "
                                f"vpp 2, got vpp {self.vpp}")
            if self.first_stage_layers or self.last_stage_layers:
                raise SpecError("plan.first_stage_layers" if self.first_stage_layers else "plan.last_stage_layers",
                                "dualpipev holds both ends of the model on rank 0; give its split as chunk_layers "
                                "(2·pp counts in virtual-stage order)")
        choice("plan.moe_routing", self.moe_routing, MOE_ROUTING)
        choice("plan.moe_probs", self.moe_probs, MOE_PROBS)
        choice("plan.ep_dispatch", self.ep_dispatch, EP_DISPATCH)
        choice("plan.ep_dispatch_format", self.ep_dispatch_format, EP_DISPATCH_FORMAT)
        if self.ep_dispatch_format == "fp8" and self.precision not in LOW_PRECISIONS:
            raise SpecError("plan.ep_dispatch_format", f"fp8 dispatches the inputs of FP8 expert matrix multiplies; "
                            f"needs a low-precision recipe ({', '.join(LOW_PRECISIONS)}), got precision "
                            f"{self.precision!r}")
        if not isinstance(self.framework, str):
            raise SpecError("plan.framework", f"must be text, got {self.framework!r}")
        for b in ("sequence_parallel", "dp_overlap", "tp_comm_overlap", "ep_overlap", "moe_sync_free", "cuda_graphs"):
            boolean(f"plan.{b}", getattr(self, b))
        if self.cuda_graphs and self.recompute == "full":
            raise SpecError("plan.cuda_graphs", "Megatron-LM refuses CUDA graphs with full recompute "
                            "('recompute_granularity must not be full when CUDA Graphs are enabled'); use recompute "
                            "none or selective")
        object.__setattr__(self, "bucket_bytes", positive_float("plan.bucket_bytes", self.bucket_bytes))
        if isinstance(self.placement, str):
            raise SpecError("plan.placement", f"must list the axes {', '.join(AXES)}; got {shown(self.placement)}")
        object.__setattr__(self, "placement", tuple(self.placement))
        for axis in self.placement:  # a nested list reached sorted(): "'<' not supported" named only `plan`
            choice("plan.placement", axis, AXES)
        if sorted(self.placement) != sorted(AXES):
            raise SpecError("plan.placement", f"must order exactly {', '.join(AXES)}; got {list(self.placement)}")
        if self.gbs % (self.dp * self.mbs):
            raise SpecError("plan.gbs", f"global batch {self.gbs} is not divisible by dp·mbs = "
                            f"{self.dp}·{self.mbs} = {self.dp * self.mbs}")
        if self.vpp > 1 and self.pp == 1:
            what = "dualpipev's two chunks" if self.pipeline_schedule == "dualpipev" else "interleaving"
            raise SpecError("plan.vpp", f"{what} (vpp={self.vpp}) needs pp > 1")
        if self.vp_group and (self.vpp == 1 or self.pipeline_schedule in ("dualpipe", "dualpipev")):
            raise SpecError("plan.vp_group", f"groups the micro-batches of the interleaved schedule; needs vpp > 1 "
                            f"and schedule auto, got vpp {self.vpp}, schedule {self.pipeline_schedule!r}")
        for knob in ("first_stage_layers", "last_stage_layers"):
            if getattr(self, knob) and self.pp == 1:
                raise SpecError(f"plan.{knob}", "sets the layers of one pipeline stage; needs pp > 1")
        if self.chunk_layers:
            if self.first_stage_layers or self.last_stage_layers:
                raise SpecError("plan.chunk_layers", "gives every chunk's layers; leave first_stage_layers and "
                                "last_stage_layers at 0 (the automatic split) with it")
            if len(self.chunk_layers) != self.pp * self.vpp:
                raise SpecError("plan.chunk_layers", f"lists {len(self.chunk_layers)} chunks; pp·vpp = "
                                f"{self.pp}·{self.vpp} = {self.pp * self.vpp} are needed")
            held = [0] * self.pp
            for j, n in enumerate(self.chunk_layers):
                held[chunk_stage(j, self.pp, self.dualpipev)] += n
            if 0 in held:
                where = "j for j < pp, else 2·pp − 1 − j (DualPipeV's V)" if self.dualpipev else "j mod pp"
                raise SpecError("plan.chunk_layers", f"leaves pipeline stage {held.index(0)} without a layer (chunk "
                                f"j runs on stage {where})")
        if self.recompute_layers and self.activation_cache == "fp8":
            raise SpecError("plan.recompute_layers", "a full recompute of only some layers is not modelled with "
                            "activation_cache fp8 (the other layers' SwiGLU recompute); recompute them all (0)")
        if self.recompute_layers and self.recompute != "full":
            raise SpecError("plan.recompute_layers", f"{self.recompute_layers} layers recomputed needs recompute: "
                            f"full, got {self.recompute!r}")
        if self.sequence_parallel and self.tp == 1:
            raise SpecError("plan.sequence_parallel", "needs tp > 1")

    @property
    def zero3_per_step(self) -> bool:
        """ZeRO-3 whose weights stay gathered through the step's micro-batches (zero3_reshard)."""
        return self.zero_stage == 3 and zero3_kept_gathered(self.zero3_reshard, self.pp)

    @property
    def comm_zero_stage(self) -> int:
        """The ZeRO stage whose traffic and memory the plan has: 1 for ZeRO-3 kept gathered through the step (one
        gather and one reduce-scatter per step; whole 16-bit weights and whole gradients held), else zero_stage."""
        return 1 if self.zero3_per_step else self.zero_stage

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches each pipeline runs per step: gbs / (dp · mbs)."""
        return self.gbs // (self.dp * self.mbs)

    @property
    def interleave_group(self) -> int:
        """Micro-batches per group of the interleaved schedule (`vp_group`, or pp: Megatron-Core's default)."""
        return self.vp_group or self.pp

    @property
    def interleave_last_group(self) -> int:
        """Micro-batches of the interleaved schedule's last group: the cool-down runs their backwards chunk by chunk
        (the remainder of the micro-batches over the group, or a whole group)."""
        g = self.interleave_group
        return min(self.num_microbatches % g or g, self.num_microbatches)

    @property
    def expert_tp(self) -> int:
        """Effective expert tensor-parallel degree (etp, or tp when etp is 0)."""
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """Expert-data-parallel degree: the ranks of one stage (tp·cp·dp) that hold the same experts,
        tp·cp·dp / (etp·ep) (Megatron-Core's expert rank layout)."""
        return max(1, self.tp * self.cp * self.dp // (self.expert_tp * self.ep))

    @property
    def low_precision(self) -> bool:
        """Matrix multiplies in a Transformer Engine FP8/MXFP8/NVFP4 recipe."""
        return self.precision in LOW_PRECISIONS

    @property
    def custom_split(self) -> bool:
        """Layers split over the pipeline by the plan (SPLIT_KNOBS), not automatically."""
        return any(getattr(self, k) for k in SPLIT_KNOBS)

    @property
    def schedule(self) -> str:
        if self.dualpipe:
            return "dualpipe"
        if self.dualpipev:
            return "dualpipev"
        return "interleaved-1f1b" if self.vpp > 1 else "1f1b"

    @property
    def dualpipev(self) -> bool:
        """DualPipeV with a pipeline to run it on (pp > 1): ranks hold two chunks on a V."""
        return self.pipeline_schedule == "dualpipev" and self.pp > 1

    @property
    def head_stage(self) -> int:
        """The pipeline stage holding the output layer and the loss: the last, or rank 0 on DualPipeV's V."""
        return 0 if self.dualpipev else self.pp - 1

    @property
    def dualpipe(self) -> bool:
        """DualPipe with a pipeline to run it on (pp > 1): ranks hold two stages."""
        return self.pipeline_schedule == "dualpipe" and self.pp > 1


def chunk_stage(j: int, pp: int, v_shape: bool) -> int:
    """The stage holding chunk (virtual stage) j: j mod pp (Megatron's interleaving), or on a V (DualPipeV, two
    chunks per stage) j for the first pp and 2·pp − 1 − j for the rest, so stage 0 holds the first and the last."""
    return (j if j < pp else 2 * pp - 1 - j) if v_shape else j % pp


SPLIT_DEFAULTS = {"first_stage_layers": 0, "last_stage_layers": 0, "chunk_layers": ()}
"""Plan knobs that split the layers over the pipeline, at their automatic-split values."""
SPLIT_KNOBS = tuple(SPLIT_DEFAULTS)


def interleave_groups_ok(pp: int, num_microbatches: int, group: int = 0) -> bool:
    """Whether Megatron-Core's interleaved schedule runs `num_microbatches` on pp stages in micro-batch groups of
    `group` (0: pp, its default; `forward_backward_pipelining_with_interleaving`): a group of pp to the
    micro-batches, and a last group (micro-batches mod group) of none or at least pp — with the default group, a
    micro-batch count pp divides."""
    g = group or pp
    return pp <= g <= num_microbatches and not 0 < num_microbatches % g < pp


def interleaved_warmup(pp: int, stage: int, vpp: int, group: int, chunk_passes: int) -> int:
    """Chunk forwards rank `stage` runs before its first backward in Megatron-Core's interleaved schedule:
    2(p − stage − 1) + (v − 1)·g for micro-batch groups of g (`group`, 0: pp), capped by its m·v chunk passes
    (`get_pp_rank_microbatches`; the simulator's program, the compiled graph and the in-flight memory all read it)."""
    return min(2 * (pp - stage - 1) + (vpp - 1) * (group or pp), chunk_passes)


def uneven_split_error(layers: int, pp: int, vpp: int, first: int, last: int) -> tuple[str, str] | None:
    """(knob at fault, why) when Megatron-Core refuses `first` / `last` layers on the first / last pipeline stage
    (0 = not set), else None: the stages left share the remaining layers evenly, and every stage's count splits into
    its vpp chunks (megatron/core/transformer/transformer_block.py get_num_layers_to_build, transformer_layer.py
    get_transformer_layer_offset). A shortfall of the middle stages is put on the last stage's knob when it is set."""
    left = pp - (first > 0) - (last > 0)
    rest = layers - first - last
    either = "last_stage_layers" if last else "first_stage_layers"
    if rest < 0 or (left == 0 and rest) or (left and (rest < left * vpp or rest % left)):
        return either, (f"{layers} layers less {first} on the first and {last} on the last stage leave {rest} for "
                        f"{left} other stages: they must split evenly, at least {vpp} each")
    for knob, where, n in (("first_stage_layers", "first", first), ("last_stage_layers", "last", last),
                           (either, "each middle", rest // left if left else 0)):
        if n % vpp:
            return knob, f"{n} layers on the {where} stage do not split into its {vpp} interleaved chunks"
    return None
