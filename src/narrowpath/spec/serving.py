"""Serving specs: how a model is deployed for inference (ServingPlan), what traffic it serves (Load), and the two
together on a system (ServingScenario).

Layout of one serving instance (TensorRT-LLM `Mapping`, vLLM `--tensor/--pipeline/--data-parallel-size`): `pp`
pipeline stages, each of `dp` attention data-parallel ranks of `tp` GPUs; the dense layers and attention are
split `tp` ways, the routed experts of an MoE model `ep` ways over all tp·dp GPUs of a stage (expert tensor
parallelism etp = tp·dp/ep). An instance has tp·dp·pp GPUs; `replicas` instances serve side by side, of which
`prefill_replicas` only prefill and hand their KV cache to the others (disaggregated serving).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from narrowpath.errors import SpecError
from narrowpath.spec._check import as_int, boolean, choice, fraction, positive_float, positive_int
from narrowpath.spec._pickle import reduce_spec
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.model import Model
from narrowpath.spec.plan import EP_DISPATCH
from narrowpath.spec.system import System

WEIGHT_PRECISIONS = ("fp32", "bf16", "fp16", "fp8", "fp4")
"""Formats of the linear layers' weights (and, for fp8/fp4, of the activations they multiply: W8A8 FP8 with
per-tensor scales, W4A4 NVFP4 with 16-element block scales)."""
KV_PRECISIONS = ("bf16", "fp16", "fp8", "fp4")
POLICIES = ("decode-first", "prefill-first", "static")
"""`decode-first`: every iteration runs all running decodes, then fills the token budget with prompts (TensorRT-LLM
in-flight batching, Sarathi-Serve stall-free batching); `prefill-first`: waiting prompts run in an iteration of
their own and decodes wait (vLLM V0 default, Orca); `static`: a whole batch is prefilled, then decoded to its end
before the next batch starts (TensorRT-LLM 0.5 `gptSessionBenchmark`, FasterTransformer)."""
ADMISSIONS = ("reserve", "on-demand")
"""KV admission: `reserve` admits a request only when blocks for its whole prompt + output fit (TensorRT-LLM
GUARANTEED_NO_EVICT, never preempts); `on-demand` allocates blocks as tokens are generated and preempts the
newest request when the cache is full (vLLM, recompute on resume)."""
EXPERT_BALANCES = ("learned", "eplb")
"""How routed tokens spread over the expert-parallel ranks: `learned` — as the trained router sends them, a
fine-grained router skewed toward hot experts (workload.moe.LEARNED_EXPERT_LOAD_CV, router_load_cv; the default
of TensorRT-LLM, vLLM and SGLang, whose expert load balancers are opt-in); `eplb` — an expert load balancer
replicates and places hot experts so the ranks' loads vary only as random assignment does (DeepSeek EPLB; TensorRT-LLM `moe_config.load_balancer`: the
busiest of 32 ranks 1.11× the mean against 2.56× without, tech blog 4 Table 1)."""
ARRIVALS = ("offline", "poisson", "fixed-batch", "trace")
PREFILL_KNOBS = ("prefill_tp", "prefill_dp", "prefill_ep", "prefill_pp", "prefill_max_batch", "prefill_max_num_tokens")
"""Knobs of a disaggregated deployment's prefill pool when its layout and limits differ from the decode pool's."""
MAX_TOKENS = 1 << 24
"""Largest prompt or output length accepted, tokens (16.7 M)."""
MAX_REQUESTS = 10_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingPlan:
    """How one model is served. 0 in a size knob means: the serving stack's default (catalog/serving_stacks.yaml)."""

    tp: int = 1
    """Tensor-parallel GPUs of one attention data-parallel rank (attention and dense layers split tp ways)."""
    pp: int = 1
    """Pipeline stages of an instance; pp micro-batches are in flight, one per stage."""
    dp: int = 1
    """Attention data-parallel ranks per instance (MoE: each rank has its own requests and KV cache; the expert
    layers serve the tokens of all of them). 1 = none."""
    ep: int = 1
    """Expert-parallel degree of the routed experts over the tp·dp GPUs of a stage; 1 = experts split by tensor
    parallelism only."""
    replicas: int = 1
    """Independent instances serving side by side (requests spread evenly)."""
    prefill_replicas: int = 0
    """Of the replicas, instances that only prefill and send the KV cache to a decode instance over the fabric;
    0 = prefill and decode share every instance (colocated)."""
    prefill_tp: int = 0
    """Layout of the prefill-only instances when it differs from the decode instances' (TensorRT-LLM disaggregated
    serving runs e.g. attention-DP prefill servers beside tensor-parallel generation servers): their tp, dp, ep and
    pp; 0 = the decode instances'. Giving any prefill_* knob gives the prefill pool limits of its own
    (prefill_max_batch, prefill_max_num_tokens; 0 = the stack's default for that layout)."""
    prefill_dp: int = 0
    prefill_ep: int = 0
    prefill_pp: int = 0
    prefill_max_batch: int = 0
    prefill_max_num_tokens: int = 0
    weight_precision: str = "bf16"
    """Format of the linear layers (WEIGHT_PRECISIONS); the output layer, router and embedding stay 16 bit."""
    kv_precision: str = "bf16"
    """Format of the KV cache (KV_PRECISIONS)."""
    max_batch: int = 0
    """Sequences one micro-batch of one attention-DP rank keeps in flight (TensorRT-LLM max_batch_size, vLLM
    max_num_seqs); 0 = stack default."""
    max_num_tokens: int = 0
    """Tokens one iteration of one micro-batch may process (decodes + prompt chunks); 0 = stack default."""
    kv_block_tokens: int = 0
    """Tokens per paged-KV block (vLLM 16, TensorRT-LLM 32); a sequence holds whole blocks. 0 = stack default."""
    kv_memory_fraction: float = 0.0
    """Share of the memory left after weights, activations and runtime that the KV cache takes (TensorRT-LLM
    kv_cache_free_gpu_mem_fraction), or, for a stack whose fraction is of the whole GPU (vLLM
    gpu_memory_utilization; stack key `kv_fraction_of: total`), of the device memory, the rest then less; 0 = stack
    default (0.9)."""
    chunked_prefill: bool | None = None
    """Split prompts into chunks that fill the token budget left by the decodes (Sarathi-Serve); None = stack
    default."""
    policy: str = ""
    """Iteration policy (POLICIES); empty = stack default (`static` for a fixed-batch load)."""
    admission: str = ""
    """KV admission (ADMISSIONS); empty = stack default."""
    spec_tokens: int = 0
    """Speculative decoding: draft tokens proposed per step (0 = off)."""
    spec_acceptance: float = 0.0
    """Probability that one draft token is accepted (what-if input; Leviathan et al. 2023 α)."""
    spec_draft_layers: int = 1
    """Transformer layers of the draft model run per draft token (1 = an MTP / EAGLE head)."""
    ep_dispatch: str = "all_to_all"
    """How routed tokens reach their experts (spec.plan EP_DISPATCH): `all_to_all` (one all-to-all of the copies
    on the ep group) or `dedup` (each token crosses the scale-out fabric once per destination node and is fanned
    out over NVLink there, DeepEP; with the model's node-limited routing, `moe.max_nodes`, at most that many
    nodes)."""
    expert_balance: str = "learned"
    """How routed tokens spread over the expert-parallel ranks (EXPERT_BALANCES); the busiest rank gates every
    MoE layer."""
    redundant_experts: int = 0
    """Extra routed-expert copies an expert load balancer places beside the model's experts (DeepSeek EPLB's
    redundant experts, SGLang `--ep-num-redundant-experts`, TensorRT-LLM's load-balancer slots beyond the experts):
    each expert-parallel rank holds (experts + redundant) / ep slots of weights, so ep need only divide that sum (EP
    72 over 256 + 32). Needs `expert_balance: eplb` — the balancer fills the slots; 0 = none. The dispatch is priced
    as without copies (a token's k experts reach about as many ranks either way)."""
    graph_batch_sizes: tuple[int, ...] = ()
    """Decode batch sizes the engine captures CUDA graphs for (TensorRT-LLM `cuda_graph_config.batch_sizes`);
    empty = the serving stack's list (a stack without one replays a graph of every decode batch's own size)."""
    graph_padding: bool | None = None
    """Pad a decode batch up to the next captured size with dummy requests (`cuda_graph_config.enable_padding`);
    without padding a batch of no captured size runs eagerly. None = the stack's."""
    framework: str = ""
    """Serving stack, free text (`TensorRT-LLM 1.0`, `vLLM 0.8`); selects its defaults for knobs left at 0."""

    __reduce__ = reduce_spec

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "dp", "ep", "replicas"):
            as_int(self, f, f"plan.{f}", maximum=1 << 20)
        for f in ("prefill_replicas", "max_batch", "max_num_tokens", "kv_block_tokens", "spec_tokens",
                  "redundant_experts") + PREFILL_KNOBS:
            as_int(self, f, f"plan.{f}", minimum=0, maximum=MAX_TOKENS)
        as_int(self, "spec_draft_layers", "plan.spec_draft_layers", maximum=1000)
        choice("plan.weight_precision", self.weight_precision, WEIGHT_PRECISIONS)
        choice("plan.kv_precision", self.kv_precision, KV_PRECISIONS)
        choice("plan.policy", self.policy, ("",) + POLICIES)
        choice("plan.admission", self.admission, ("",) + ADMISSIONS)
        choice("plan.ep_dispatch", self.ep_dispatch, EP_DISPATCH)
        choice("plan.expert_balance", self.expert_balance, EXPERT_BALANCES)
        if self.chunked_prefill is not None:
            boolean("plan.chunked_prefill", self.chunked_prefill)
        if self.graph_padding is not None:
            boolean("plan.graph_padding", self.graph_padding)
        if not isinstance(self.graph_batch_sizes, tuple):
            raise SpecError("plan.graph_batch_sizes", f"must be a list of batch sizes, got {self.graph_batch_sizes!r}")
        object.__setattr__(self, "graph_batch_sizes", tuple(
            positive_int(f"plan.graph_batch_sizes[{i}]", b, maximum=1 << 20)
            for i, b in enumerate(self.graph_batch_sizes)))
        if self.kv_memory_fraction:
            fraction("plan.kv_memory_fraction", self.kv_memory_fraction)
        positive_float("plan.spec_acceptance", self.spec_acceptance, allow_zero=True)
        if self.spec_acceptance >= 1.0:
            raise SpecError("plan.spec_acceptance", f"must be in [0, 1), got {self.spec_acceptance}")
        if self.redundant_experts and self.expert_balance != "eplb":
            raise SpecError("plan.redundant_experts", "redundant expert copies are placed by an expert load balancer: "
                            "give expert_balance eplb")
        if self.spec_tokens and self.policy == "static":
            raise SpecError("plan.spec_tokens", "speculative decoding needs continuous batching (policy "
                            "decode-first or prefill-first)")
        if self.prefill_replicas and self.prefill_replicas >= self.replicas:
            raise SpecError("plan.prefill_replicas", f"{self.prefill_replicas} of {self.replicas} replicas leaves "
                            "none to decode (disaggregation needs prefill_replicas < replicas)")
        if self.prefill_replicas and self.policy == "static":
            raise SpecError("plan.prefill_replicas", "disaggregated serving needs continuous batching")
        if not self.prefill_replicas:
            for f in PREFILL_KNOBS:
                if getattr(self, f):
                    raise SpecError(f"plan.{f}", "lays out prefill-only instances: give prefill_replicas > 0")
        if not isinstance(self.framework, str):
            raise SpecError("plan.framework", f"must be text, got {self.framework!r}")

    @property
    def instance_gpus(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def num_gpus(self) -> int:
        pool = self.prefill_pool()
        if pool is None:
            return self.instance_gpus * self.replicas
        return self.instance_gpus * (self.replicas - self.prefill_replicas) + pool.num_gpus

    def prefill_pool(self) -> "ServingPlan | None":
        """The prefill-only instances as a plan of their own (replicas = prefill_replicas, their layout and limits)
        when a prefill_* knob gives them one; None when they share the decode instances' layout and limits."""
        if not any(getattr(self, f) for f in PREFILL_KNOBS):
            return None
        kw = {f: getattr(self, "prefill_" + f) or getattr(self, f) for f in ("tp", "dp", "ep", "pp")}
        return dataclasses.replace(self, **kw, replicas=self.prefill_replicas, max_batch=self.prefill_max_batch,
                                   max_num_tokens=self.prefill_max_num_tokens, prefill_replicas=0,
                                   **dict.fromkeys(PREFILL_KNOBS, 0))

    @property
    def expert_tp(self) -> int:
        """Ways each routed expert is split: the tp·dp GPUs of a stage over ep."""
        return max(1, self.tp * self.dp // self.ep)

    @property
    def disaggregated(self) -> bool:
        return self.prefill_replicas > 0

    def expert_slots(self, num_experts: int) -> int:
        """Routed-expert weight slots spread over the ep ranks: the model's experts and the balancer's copies."""
        return num_experts + self.redundant_experts


@dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    """The traffic: when requests arrive and how long they are."""

    arrival: str = "offline"
    """`offline` (all queued at time 0), `poisson` (at `rate_per_s`), `fixed-batch` (static batches of
    `batch_size`), `trace` (arrival time, prompt and output lengths of each request in `requests`)."""
    rate_per_s: float = 0.0
    """Mean arrival rate of a Poisson stream, requests/s."""
    batch_size: int = 0
    """Sequences of a fixed batch."""
    concurrency: int = 0
    """Closed loop: at most this many requests outstanding; a new one is sent when one ends (trtllm-bench
    --concurrency). 0 = open loop."""
    input_tokens: int = 0
    """Prompt length, tokens (every request; a trace gives its own)."""
    output_tokens: int = 0
    """Generated tokens per request."""
    num_requests: int = 0
    """Requests in the run; 0 = one fixed batch, or 1,000 otherwise."""
    seed: int = 0
    """Seed of the arrival process (numpy Generator)."""
    requests: tuple[tuple[float, int, int], ...] = ()
    """Trace: (arrival time s, prompt tokens, output tokens) per request, sorted by time."""

    __reduce__ = reduce_spec

    def __post_init__(self) -> None:
        choice("workload.scenario", self.arrival, ARRIVALS)
        object.__setattr__(self, "requests", tuple(tuple(r) for r in self.requests))
        positive_float("workload.request_rate_per_s", self.rate_per_s, allow_zero=True)
        for attr in ("batch_size", "concurrency", "num_requests"):
            as_int(self, attr, f"workload.{attr}", minimum=0, maximum=MAX_REQUESTS)
        as_int(self, "seed", "workload.seed", minimum=0, maximum=2**63 - 1)
        if self.arrival == "trace":
            if not self.requests:
                raise SpecError("workload.requests", "a trace needs at least one request")
            return
        for field, value in (("input_tokens", self.input_tokens), ("output_tokens", self.output_tokens)):
            if value == 0:
                raise SpecError(f"workload.{field}", "is required: every request's length in tokens (or a "
                                "requests_file of arrival time, input and output lengths)")
            as_int(self, field, f"workload.{field}", maximum=MAX_TOKENS)
        if self.arrival == "poisson" and self.rate_per_s <= 0:
            raise SpecError("workload.request_rate_per_s", "a Poisson stream needs a rate > 0 requests/s")
        if self.arrival == "fixed-batch" and self.batch_size < 1:
            raise SpecError("workload.batch_size", "a fixed batch needs batch_size >= 1")

    @property
    def total_requests(self) -> int:
        if self.arrival == "trace":
            return len(self.requests)
        if self.num_requests:
            return self.num_requests
        return self.batch_size if self.arrival == "fixed-batch" else 1000

    @property
    def max_seq_tokens(self) -> int:
        """Longest prompt + output of any request."""
        if self.arrival == "trace":
            return max(i + o for _, i, o in self.requests)
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingScenario:
    """A model served on a system under a load."""

    name: str = "serving"
    system: System
    model: Model
    plan: ServingPlan
    load: Load
    num_gpus: int
    """GPUs of the deployment; must equal replicas·tp·dp·pp."""
    calibration: Calibration | None = None
    """Efficiency profile; None = the catalog's profile of the system's device (the one training uses)."""
    chosen: tuple[tuple[str, str], ...] = ()
    """(knob, what was chosen and why) for every knob the stack's defaults or `choose` filled in."""

    __reduce__ = reduce_spec

    def __post_init__(self) -> None:
        object.__setattr__(self, "chosen", tuple(tuple(c) for c in self.chosen))
        as_int(self, "num_gpus", "num_gpus", maximum=1 << 24)
        for where, msg in serving_consistency(self.model, self.plan, self.num_gpus, self.system):
            raise SpecError(where, msg)


def serving_consistency(model: Model, plan: ServingPlan, num_gpus: int, system: System) -> list[tuple[str, str]]:
    """Cross-field violations of a serving deployment as (field, message); empty when consistent. A prefill pool
    of its own layout is checked as a plan of its own (its layout errors named prefill_*, the others said to be
    the prefill pool's unless the decode instances have them too)."""
    pool = plan.prefill_pool()
    if pool is None:
        return _layout_consistency(model, plan, num_gpus, system)
    errs: list[tuple[str, str]] = []
    if plan.num_gpus != num_gpus:
        errs.append(("plan", f"(replicas − prefill_replicas)·tp·dp·pp + prefill_replicas·prefill tp·dp·pp = "
                     f"{plan.replicas - plan.prefill_replicas}·{plan.instance_gpus} + {plan.prefill_replicas}·"
                     f"{pool.instance_gpus} = {plan.num_gpus} does not equal num_gpus {num_gpus}"))
    dec = dataclasses.replace(plan, **dict.fromkeys(PREFILL_KNOBS, 0))  # the decode instances, as one layout
    errs += _layout_consistency(model, dec, dec.num_gpus, system)
    for where, msg in _layout_consistency(model, pool, pool.num_gpus, system):
        if (where, msg) in errs:
            continue
        if where.startswith("plan.") and where[5:] in ("tp", "dp", "ep", "pp"):
            errs.append(("plan.prefill_" + where[5:], msg))
        else:
            errs.append((where, f"in the prefill pool: {msg}"))
    return errs


def _layout_consistency(model: Model, plan: ServingPlan, num_gpus: int, system: System) -> list[tuple[str, str]]:
    """Cross-field violations of one layout (every instance alike)."""
    errs: list[tuple[str, str]] = []
    p = plan
    if p.num_gpus != num_gpus:
        errs.append(("plan", f"replicas·tp·dp·pp = {p.replicas}·{p.tp}·{p.dp}·{p.pp} = {p.num_gpus} does not equal "
                     f"num_gpus {num_gpus}"))
    if model.arch != "transformer":
        errs.append(("model.arch", f"serving models decoder-only transformers, got {model.arch!r}"))
        return errs
    if model.heads % p.tp:
        errs.append(("plan.tp", f"tp {p.tp} does not divide model.heads {model.heads}"))
    if model.kv_heads % p.tp and p.tp % model.kv_heads:
        errs.append(("plan.tp", f"tp {p.tp} and model.kv_heads {model.kv_heads}: one must divide the other"))
    if model.ffn % p.tp:
        errs.append(("plan.tp", f"tp {p.tp} does not divide model.ffn {model.ffn}"))
    if p.pp > model.layers:
        errs.append(("plan.pp", f"pp {p.pp} exceeds model.layers {model.layers}"))
    if model.moe is None:
        if p.ep > 1:
            errs.append(("plan.ep", f"expert parallelism (ep {p.ep}) needs an MoE model"))
        if p.redundant_experts:
            errs.append(("plan.redundant_experts", "redundant expert copies need an MoE model"))
        if p.dp > 1:
            errs.append(("plan.dp", "attention data parallelism needs an MoE model (for a dense model, dp "
                         "instances are replicas)"))
    else:
        if p.redundant_experts and p.ep == 1:
            errs.append(("plan.redundant_experts", "redundant expert copies spread hot experts over expert-parallel "
                         "ranks: give ep > 1"))
        slots = p.expert_slots(model.moe.num_experts)
        if slots % p.ep:
            extra = f" + plan.redundant_experts {p.redundant_experts} = {slots}" if p.redundant_experts else ""
            errs.append(("plan.ep", f"ep {p.ep} does not divide model.moe.num_experts {model.moe.num_experts}{extra}"))
        if (p.tp * p.dp) % p.ep:
            errs.append(("plan.ep", f"ep {p.ep} does not divide the tp·dp = {p.tp * p.dp} GPUs of a stage"))
        elif model.moe.expert_ffn % p.expert_tp:
            errs.append(("plan.ep", f"expert tensor parallelism tp·dp/ep = {p.expert_tp} does not divide "
                         f"model.moe.expert_ffn {model.moe.expert_ffn}"))
    dev = system.device
    if p.weight_precision == "fp4" or p.kv_precision == "fp4":
        if not dev.block_scaled_formats or "fp4" not in dev.peak_matrix_flop_per_s:
            what = "plan.weight_precision" if p.weight_precision == "fp4" else "plan.kv_precision"
            errs.append((what, f"fp4 (NVFP4) needs block-scaled FP4 tensor cores (Blackwell); {dev.name} has none"))
    if "bf16" in (p.weight_precision, p.kv_precision) and dev.supports("bf16"):
        what = "plan.weight_precision" if p.weight_precision == "bf16" else "plan.kv_precision"
        errs.append((what, f"bf16: {dev.supports('bf16')}; give fp16"))
    if "fp8" in (p.weight_precision, p.kv_precision) and "fp8" not in dev.peak_matrix_flop_per_s:
        what = "plan.weight_precision" if p.weight_precision == "fp8" else "plan.kv_precision"
        errs.append((what, f"fp8 needs FP8 tensor cores (Hopper or later); {dev.name} has none"))
    if p.tp > system.scale_up_domain:
        errs.append(("plan.tp", f"tp {p.tp} exceeds the scale-up domain of {system.scale_up_domain} GPUs (a tensor-"
                     "parallel all-reduce per layer and token across the scale-out fabric is not served)"))
    return errs
